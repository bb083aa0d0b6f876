-- Resolves the open connection_limit_reached conflicts whose connection is
-- no longer paused: its provider's daily limit has reset and its rows are
-- claimed again. It returns how many it resolved.

with resolved as (
    update external_integration_conflicts x
    set status = 'resolved', resolved_at = now(), resolution_reason = @reason::text
    where x.conflict_type = 'connection_limit_reached' and x.status = 'open'
      and not exists (select 1 from integration_outbox_connection_pace p
          where p.connection_id = x.integration_connection_id and p.paused_until > now())
    returning 1
)
select count(*) from resolved
