-- Whether no older queued or failed command of the outbox row d's
-- organization, connection and entity waits: what a row the claim's walk
-- does not bring (a listed id, a reclaim) reads besides entity_head, since
-- entity_head lets an older due row of the pair pass and a queued row due
-- from the start is not in the entity order index. It reads the walk index
-- (walk_unparked_idx) over the pair's rows older than d (created_at <= d's bounds the
-- index scan: the finer test after it is not an index condition).
--
-- Stand-in context: the outbox row d.

select
/*begin:entity_no_older_queued*/
not exists (
        select 1 from external_integration_outbox x
        where x.organization_id = d.organization_id
          and x.integration_connection_id = d.integration_connection_id
          and x.status in ('queued', 'failed')
          and (x.waiting_for_outbox_id is null or x.status <> 'queued')
          and x.created_at <= d.created_at
          and (x.created_at < d.created_at or (x.created_at = d.created_at and x.id < d.id))
          and x.local_entity_id = d.local_entity_id
          and x.local_entity_type is not distinct from d.local_entity_type)
/*end:entity_no_older_queued*/
from external_integration_outbox d
