-- A stuck view: queued rows due for longer than @overdue_seconds: the
-- scheduled dispatch is not taking them. Of the organization
-- @organization_id when not null; up to @limit, each with the total count of
-- its kind. The row columns are list.sql's; the rows are read in parts, as
-- list.sql's queued rows.

select o.id::text, o.organization_id::text, coalesce(o.integration_connection_id::text, ''),
    coalesce(o.provider, ''), coalesce(o.command_type, ''), o.status, o.attempt_count,
    greatest(@max_attempts::int - o.attempt_count, 0), o.next_attempt_at::timestamptz, o.lease_expires_at,
    coalesce(o.provider_status, ''), coalesce(o.last_error, ''), o.created_at::timestamptz,
    coalesce(o.updated_at, o.created_at),
    count(*) over ()
from (
    select o.* from external_integration_outbox o
    where o.status = 'queued' and o.integration_connection_id is not null
      and (o.waiting_for_outbox_id is null or o.status <> 'queued')
      and (@organization_id::uuid is null or o.organization_id = @organization_id::uuid)
      and coalesce(o.next_attempt_at, o.created_at) < now() - make_interval(secs => @overdue_seconds::float8)
    union all
    -- Parked followers (claim_scheduled.sql), from when they were parked.
    select o.* from external_integration_outbox o
    where o.status = 'queued' and o.waiting_for_outbox_id is not null
      and (@organization_id::uuid is null or o.organization_id = @organization_id::uuid)
      and coalesce(o.next_attempt_at, o.created_at) < now() - make_interval(secs => @overdue_seconds::float8)
    union all
    select o.* from external_integration_outbox o
    where o.status = 'queued' and o.integration_connection_id is null
      and (@organization_id::uuid is null or o.organization_id = @organization_id::uuid)
      and coalesce(o.next_attempt_at, o.created_at) < now() - make_interval(secs => @overdue_seconds::float8)
) o
order by o.created_at, o.id
limit @limit::bigint
