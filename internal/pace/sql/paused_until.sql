-- What stops a call to the connection @connection_id right now: the end of
-- its running pause, if any, and why it was paused; and why it needs
-- reauthorization, if it does (its connection_unauthorized conflict is open:
-- no call goes through it until the host reconnects it). Only a pause ending
-- after @after counts: a caller that waited for a slot passes the slot, so
-- that a pause written while it waited and covering its slot stops it, and
-- the pause its slot was taken after (the slot is its end, or later) does
-- not. No row: nothing stops the call.

select p.paused_until, coalesce(p.pause_reason, ''), coalesce(s.unauthorized_reason, '')
from (select @connection_id::uuid as id) c
left join integration_outbox_connection_pace p
    on p.connection_id = c.id and p.paused_until > greatest(now(), @after::timestamptz)
left join integration_outbox_connection_state s
    on s.connection_id = c.id and s.unauthorized_since is not null
where p.connection_id is not null or s.connection_id is not null
