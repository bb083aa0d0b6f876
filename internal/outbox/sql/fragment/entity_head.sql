-- Whether the outbox row d may go now under per-entity order, as far as the
-- entity order index tells: no other command of its connection and entity
-- is in flight (processing under a live lease, or accepted and awaiting its
-- follow-up), and none older waits that the claim's walk may pass by
-- (queued or failed but not due, at or past @max_attempts or of another
-- organization; parked: queued with a waiting_for_outbox_id, which the walk
-- never brings, see claim_scheduled.sql; processing with an expired lease:
-- reclaimable). An older
-- due queued or failed row of d's pair does not hold d here: the walk reads
-- the pair oldest first and brings that one before d (heads in fragment/take.sql
-- keeps the oldest of an entity's candidates), and a row the walk does not
-- bring (a listed id, a reclaim) reads entity_no_older_queued as well. A
-- queued row due from the start is in no index of the order at all.
--
-- Stand-in context: the outbox row d.

select
/*begin:entity_head*/
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
                            and x.attempt_count < @max_attempts
                            and (x.waiting_for_outbox_id is null or x.status <> 'queued')))))
/*end:entity_head*/
from external_integration_outbox d
