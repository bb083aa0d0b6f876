-- The command that holds the row @id of the organization @organization_id
-- back under per-entity order, when the row is queued or failed, or an
-- accepted row awaiting its follow-up, and its connection is ordered:
-- another command of its connection and entity in flight (for an accepted
-- row: under a live lease, or accepted and older), else, for a queued or
-- failed row, the oldest older one still waiting. No row when nothing holds
-- it. The others are read as the claim reads them: in the entity order index
-- (in flight, failed, queued but due later), and among the pair's older
-- queued and failed rows in the claim's walk index.

with o as (
    select o.* from external_integration_outbox o
    join integration_connections c on c.id = o.integration_connection_id and c.organization_id = o.organization_id
    where o.organization_id = @organization_id::uuid and o.id = @id::uuid
      and (o.status in ('queued', 'failed') or (o.status = 'processing' and o.provider_status is not null))
      and o.local_entity_id is not null
      and coalesce((c.config_json -> 'ordered')::jsonb, 'true'::jsonb) <> 'false'::jsonb
)
select x.id::text
from (
    select x.id, x.status, x.created_at
    from o join external_integration_outbox x
        on x.integration_connection_id = o.integration_connection_id and x.local_entity_id = o.local_entity_id
       and x.local_entity_type is not distinct from o.local_entity_type and x.id <> o.id
    where (x.status in ('failed', 'processing') or (x.status = 'queued' and x.next_attempt_at > x.created_at))
      and ((x.status = 'processing' and (x.lease_expires_at >= now()
                                         or (x.lease_expires_at is null and x.provider_status is null)
                                         or (x.provider_status is not null
                                             and (o.status <> 'processing' or (x.created_at, x.id) < (o.created_at, o.id)))))
           or (o.status <> 'processing' and (x.created_at, x.id) < (o.created_at, o.id)))
    union all
    select x.id, x.status, x.created_at
    from o join external_integration_outbox x
        on x.organization_id = o.organization_id and x.integration_connection_id = o.integration_connection_id
       and x.local_entity_id = o.local_entity_id and x.local_entity_type is not distinct from o.local_entity_type
    where o.status <> 'processing' and x.status in ('queued', 'failed')
      and (x.waiting_for_outbox_id is null or x.status <> 'queued') and (x.created_at, x.id) < (o.created_at, o.id)
) x
order by x.status = 'processing' desc, x.created_at, x.id
limit 1
