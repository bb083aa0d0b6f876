-- entity_head for a due row d that the claim's walk brings: an older command
-- of its entity that the walk brings too (queued or failed, due, attempts
-- left, the same organization) does not hold it here, since the walk reads
-- the pair oldest first and brings that one before d: of the candidates of
-- one entity only the oldest goes (heads in claim.sql), and the newer ones
-- tell it that it has followers.
not exists (
        select 1 from external_integration_outbox x
        where x.integration_connection_id = d.integration_connection_id
          and x.local_entity_id = d.local_entity_id
          and x.local_entity_type is not distinct from d.local_entity_type
          and (x.status in ('failed', 'processing') or (x.status = 'queued' and x.next_attempt_at > x.created_at))
          and x.id <> d.id
          and ((x.status = 'processing' and (x.provider_status is not null or not x.lease_expires_at < now()
                                             or x.lease_expires_at is null))
               or ((x.created_at < d.created_at or (x.created_at = d.created_at and x.id < d.id))
                   and not (x.status in ('queued', 'failed') and x.organization_id = d.organization_id
                            and coalesce(x.next_attempt_at, now()) <= now()
                            and x.attempt_count < @max_attempts))))
