-- Whether a dispatch run has nothing to do: true when no row of the run's
-- scope (@organization_id: an optional organization; @ids: an optional id
-- list; the scope of the sweep and of the claim) is queued, failed or
-- processing, none is queued or failed waiting for another row, and no
-- start (integration_outbox_starts) older than ten minutes is left in the
-- organization (in any, without @organization_id: the scope of the sweep's
-- forgotten step, which does not read @ids). Then the sweep
-- (dead_letter_expired.sql) would change nothing: every row it ends is
-- queued, failed or processing in the scope, each of its other writes (the
-- conflicts, the events, the rows woken) follows from a row it ends or a
-- waiting row (a parked follower, a failed row waiting for another), and
-- the starts it deletes are older than ten minutes; and a claim would find
-- nothing. The dispatch run sends this first and, when it is true, nothing
-- else: it reads two tables and writes none, where the sweep touches many,
-- whose parse and plan on a new connection (a cold start) are most of an
-- idle run's cost.
--
-- The first four probes are the sweep's last ones, one per claim index
-- (walk_unparked_idx, claim_orphan_idx, connection_leased_idx,
-- follow_up_idx). The probe of the waiting rows (waiting_idx) finds the
-- parked followers, which the walk index does not hold (claim_scheduled.sql),
-- and the failed rows waiting for another: one whose awaited row has ended
-- or is gone without waking it is the sweep's to wake (its unparked step).

select not (
    exists (select 1 from external_integration_outbox o
            where o.status in ('queued', 'failed') and o.integration_connection_id is not null
              and (o.waiting_for_outbox_id is null or o.status <> 'queued')
              and (@organization_id::uuid is null or o.organization_id = @organization_id)
              and (@ids::text[] is null or o.id = any(@ids::text[]::uuid[])))
    or exists (select 1 from external_integration_outbox o
            where o.status in ('queued', 'failed') and o.integration_connection_id is null
              and (@organization_id::uuid is null or o.organization_id = @organization_id)
              and (@ids::text[] is null or o.id = any(@ids::text[]::uuid[])))
    or exists (select 1 from external_integration_outbox o
            where o.status = 'processing' and o.provider_status is null
              and (@organization_id::uuid is null or o.organization_id = @organization_id)
              and (@ids::text[] is null or o.id = any(@ids::text[]::uuid[])))
    or exists (select 1 from external_integration_outbox o
            where o.status = 'processing' and o.provider_status is not null
              and (@organization_id::uuid is null or o.organization_id = @organization_id)
              and (@ids::text[] is null or o.id = any(@ids::text[]::uuid[])))
    or exists (select 1 from external_integration_outbox o
            where o.waiting_for_outbox_id is not null and o.status in ('queued', 'failed')
              and (@organization_id::uuid is null or o.organization_id = @organization_id)
              and (@ids::text[] is null or o.id = any(@ids::text[]::uuid[])))
    or exists (select 1 from integration_outbox_starts st
            where st.created_at < now() - interval '10 minutes'
              and (@organization_id::uuid is null or st.organization_id = @organization_id))
)
