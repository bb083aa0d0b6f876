-- A stuck view: entities of ordered connections whose first live command
-- (queued, failed or processing, oldest first) is older than
-- @wait_seconds and has others waiting behind it: one row per entity, oldest
-- head first, with how many wait behind the head and the head in list.sql's
-- row columns (@max_attempts: MAX_ATTEMPTS). Of the organization
-- @organization_id when not null; up to @limit, each with the total count.

with live as (
    select o.*,
        row_number() over w as place,
        count(*) over (partition by o.integration_connection_id, o.local_entity_type, o.local_entity_id) as live
    from external_integration_outbox o
    join integration_connections c on c.id = o.integration_connection_id and c.organization_id = o.organization_id
    where o.status in ('queued', 'failed', 'processing') and o.local_entity_id is not null
      and coalesce((c.config_json -> 'ordered')::jsonb, 'true'::jsonb) <> 'false'::jsonb
      and (@organization_id::uuid is null or o.organization_id = @organization_id::uuid)
    window w as (partition by o.integration_connection_id, o.local_entity_type, o.local_entity_id
                 order by o.created_at, o.id)
)
select coalesce(o.local_entity_type, ''), o.local_entity_id::text, (o.live - 1)::int,
    o.id::text, o.organization_id::text, coalesce(o.integration_connection_id::text, ''),
    coalesce(o.provider, ''), coalesce(o.command_type, ''), o.status, o.attempt_count,
    greatest(@max_attempts::int - o.attempt_count, 0), o.next_attempt_at::timestamptz, o.lease_expires_at,
    coalesce(o.provider_status, ''), coalesce(o.last_error, ''), o.created_at::timestamptz,
    coalesce(o.updated_at, o.created_at),
    count(*) over ()
from live o
where o.place = 1 and o.live > 1 and o.created_at < now() - make_interval(secs => @wait_seconds::float8)
order by o.created_at, o.id
limit @limit::bigint
