-- The end of the running pause of the connection @connection_id, if any,
-- and why it was paused. Only a pause ending after @after counts: a caller
-- that waited for a slot passes the slot, so that a pause written while it
-- waited and covering its slot stops it, and the pause its slot was taken
-- after (the slot is its end, or later) does not.

select paused_until, coalesce(pause_reason, '') from integration_outbox_connection_pace
where connection_id = @connection_id::uuid and paused_until > greatest(now(), @after::timestamptz)
