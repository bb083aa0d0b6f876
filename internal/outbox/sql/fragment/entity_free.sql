-- Whether no other command of the outbox row d's connection and entity is in
-- flight ahead of d: what an accepted row's follow-up needs (it is in flight
-- itself, so older commands requeued since wait behind it). A row under a
-- live lease (or with neither lease nor provider status) holds d whatever
-- its age; another accepted row holds d only when it is older (created_at,
-- then id), so of two accepted rows of one entity the older is followed up
-- first instead of each holding the other for good.
--
-- Stand-in context: the outbox row d.

select
/*begin:entity_free*/
not exists (
        select 1 from external_integration_outbox x
        where x.integration_connection_id = d.integration_connection_id
          and x.local_entity_id = d.local_entity_id
          and x.local_entity_type is not distinct from d.local_entity_type
          and x.status = 'processing'
          and x.id <> d.id
          and (not x.lease_expires_at < now()
               or (x.lease_expires_at is null and x.provider_status is null)
               or (x.provider_status is not null
                   and (x.created_at < d.created_at or (x.created_at = d.created_at and x.id < d.id)))))
/*end:entity_free*/
from external_integration_outbox d
