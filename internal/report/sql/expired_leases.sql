-- A stuck view: claimed rows whose lease ran out before a result was
-- recorded (the push crashed or timed out); the next dispatch claims them
-- again, or dead-letters them when no attempts are left. Of the organization
-- @organization_id when not null; up to @limit, each with the total count of
-- its kind. The row columns are list.sql's.

select o.id::text, o.organization_id::text, coalesce(o.integration_connection_id::text, ''),
    coalesce(o.provider, ''), coalesce(o.command_type, ''), o.status, o.attempt_count,
    greatest(@max_attempts::int - o.attempt_count, 0), o.next_attempt_at::timestamptz, o.lease_expires_at,
    coalesce(o.provider_status, ''), coalesce(o.last_error, ''), o.created_at::timestamptz,
    coalesce(o.updated_at, o.created_at),
    count(*) over ()
from external_integration_outbox o
where o.status = 'processing' and o.provider_status is null and o.lease_expires_at < now()
  and (@organization_id::uuid is null or o.organization_id = @organization_id::uuid)
order by o.lease_expires_at, o.id
limit @limit::bigint
