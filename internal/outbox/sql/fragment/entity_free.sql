-- Whether no other command of the outbox row d's connection and entity is in
-- flight: what an accepted row's follow-up needs (it is in flight itself, so
-- older commands requeued since wait behind it).
not exists (
        select 1 from external_integration_outbox x
        where x.integration_connection_id = d.integration_connection_id
          and x.local_entity_id = d.local_entity_id
          and x.local_entity_type is not distinct from d.local_entity_type
          and x.status = 'processing'
          and x.id <> d.id
          and (x.provider_status is not null or not x.lease_expires_at < now() or x.lease_expires_at is null))
