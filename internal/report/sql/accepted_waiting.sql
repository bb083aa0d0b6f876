-- A stuck view: rows the provider accepted but has not finished for longer
-- than @accepted_seconds; nothing follows them up automatically. Of the
-- organization @organization_id when not null; up to @limit, each with the
-- total count of its kind. The row columns are list.sql's.

select o.id::text, o.organization_id::text, coalesce(o.integration_connection_id::text, ''),
    coalesce(o.provider, ''), coalesce(o.command_type, ''), o.status, o.attempt_count,
    greatest(@max_attempts::int - o.attempt_count, 0), o.next_attempt_at::timestamptz, o.lease_expires_at,
    coalesce(o.provider_status, ''), coalesce(o.last_error, ''), o.created_at::timestamptz,
    coalesce(o.updated_at, o.created_at),
    count(*) over ()
from external_integration_outbox o
where o.status = 'processing' and o.provider_status is not null
  and o.updated_at < now() - make_interval(secs => @accepted_seconds::float8)
  and (@organization_id::uuid is null or o.organization_id = @organization_id::uuid)
order by o.updated_at, o.id
limit @limit::bigint
