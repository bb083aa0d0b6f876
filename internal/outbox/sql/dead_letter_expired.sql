-- Ends the rows that have no attempt left, with their one open conflict
-- (provider_rejected: attempts exhausted): rows whose lease expired after
-- their last attempt, accepted rows whose follow-up is due, and due queued or
-- failed rows at or past @max_attempts (MAX_ATTEMPTS was lowered below what
-- they have used; no claim would ever take them). @max_attempts:
-- MAX_ATTEMPTS; @organization_id: an optional organization; @ids: an optional
-- id list (the same scope as the claim). Each row ended writes one Command
-- Dead-Lettered event (@events_on). The queued and failed rows of a disabled
-- or unauthorized connection are left alone: they are held, not exhausted.
-- The rows waiting for a row it ends are due at once, and so is a parked
-- follower or a waiting row whose awaited row ended or went otherwise
-- without waking it. It also deletes the
-- starts (integration_outbox_starts) that no record will delete: those of
-- claims their row no longer holds (a push that crashed before its record,
-- a claim given back), ten minutes after they were written, or at once
-- for a row it ends. A start the
-- push had made (started_at set) leaves one attempt-history row, outcome
-- lease_expired and outcome_unknown: its call may have reached the
-- provider, so a later attempt of the row, or its rerun, looks the
-- document up first.

with exhausted as (
    select o.id from external_integration_outbox o
    where o.status = 'processing' and o.provider_status is null and o.lease_expires_at < now()
      and o.attempt_count >= @max_attempts
      and (@organization_id::uuid is null or o.organization_id = @organization_id)
      and (@ids::text[] is null or o.id = any(@ids::text[]::uuid[]))
    union all
    select o.id from external_integration_outbox o
    where o.status = 'processing' and o.provider_status is not null and o.next_attempt_at <= now()
      and o.attempt_count >= @max_attempts
      and (@organization_id::uuid is null or o.organization_id = @organization_id)
      and (@ids::text[] is null or o.id = any(@ids::text[]::uuid[]))
    union all
    -- The queued and failed rows in two parts, with a connection and
    -- without: each is the condition of a claim index (walk_unparked_idx,
    -- claim_orphan_idx), which holds every one of them.
    select o.id from external_integration_outbox o
    where o.status in ('queued', 'failed') and o.integration_connection_id is not null
      and (o.waiting_for_outbox_id is null or o.status <> 'queued')
      and coalesce(o.next_attempt_at, now()) <= now()
      and o.attempt_count >= @max_attempts
      and (@organization_id::uuid is null or o.organization_id = @organization_id)
      and (@ids::text[] is null or o.id = any(@ids::text[]::uuid[]))
      -- A disabled or unauthorized connection's rows are held as they are.
      and not exists (select 1 from integration_outbox_connection_state st
                      where st.connection_id = o.integration_connection_id
                        and (st.disabled_at is not null or st.unauthorized_since is not null))
    union all
    select o.id from external_integration_outbox o
    where o.status in ('queued', 'failed') and o.integration_connection_id is null
      and coalesce(o.next_attempt_at, now()) <= now()
      and o.attempt_count >= @max_attempts
      and (@organization_id::uuid is null or o.organization_id = @organization_id)
      and (@ids::text[] is null or o.id = any(@ids::text[]::uuid[]))
), expired as (
    update external_integration_outbox o
    set status = 'dead_letter',
        last_error = integration_outbox_fit(left(case
                when o.status in ('queued', 'failed')
                then 'attempts exhausted: ' || o.attempt_count || ' attempts made, MAX_ATTEMPTS is ' || @max_attempts
                when o.provider_status is null
                then 'attempts exhausted: the lease of the last attempt expired without a recorded result'
                else 'attempts exhausted: the provider answered ' || o.provider_status || ' but never confirmed completion'
            end || coalesce('; previous error: ' || o.last_error, ''), 1000), 'external_integration_outbox', 'last_error'),
        lease_expires_at = null,
        next_attempt_at = null,
        updated_at = now()
    from exhausted x
    where o.id = x.id and o.attempt_count >= @max_attempts
      and ((o.status = 'processing' and o.provider_status is null and o.lease_expires_at < now())
        or (o.status = 'processing' and o.provider_status is not null and o.next_attempt_at <= now())
        or (o.status in ('queued', 'failed') and coalesce(o.next_attempt_at, now()) <= now()))
    returning o.*
), exhausted_rows as (
    select * from expired
), woken as (
    -- The rows waiting for a row ended here are due now, as when the
    -- record ends it (record.sql's woken step), due since their creation.
    -- Found as there: a probe of the waiting index per ended row (the
    -- lateral y, a subquery by its offset 0), updated by their id, what
    -- they wait for checked again with "is not distinct from" (no index
    -- serves it): as a join, the plan read every parked follower at every
    -- sweep that ended a row (TestEndingRowsReadsNoParkedFollowerOfOthers).
    update external_integration_outbox w
    set /*fragment:wake*/ updated_at = now() /*end:wake*/
    from expired e
    cross join lateral (
        select y.id from external_integration_outbox y
        where y.waiting_for_outbox_id is not null and y.waiting_for_outbox_id = e.id
          and y.organization_id = e.organization_id and y.status in ('queued', 'failed')
        offset 0) y
    where w.id = y.id
      and w.waiting_for_outbox_id is not distinct from e.id
      and w.organization_id = e.organization_id and w.status in ('queued', 'failed')
      and w.id not in (select x.id from exhausted x)
    returning w.id
), unparked as (
    -- A parked follower (claim_scheduled.sql) whose awaited row is no
    -- longer queued, failed or processing without having woken it (the
    -- host deleted it or changed its status; it ended while the claim
    -- parked this one; a statement that wakes nobody ended it) is due
    -- again. So is a failed row waiting for another (record.sql's
    -- waiting_for) not due yet whose awaited row ended without waking it:
    -- the two records ran at the same moment, each statement's snapshot
    -- taken before the other's commit, so the waiting row's record saw
    -- the awaited row in flight and the awaited row's record did not see
    -- the wait; without this step it would wait until its recheck (its
    -- awaited row's next attempt plus push.WaitRecheck). A failed row
    -- already due is left as it is (no new version of the host's row each
    -- run). It reads every waiting row of the scope (the waiting index).
    update external_integration_outbox w
    set /*fragment:wake*/ updated_at = now() /*end:wake*/
    where w.waiting_for_outbox_id is not null
      and (w.status = 'queued' or (w.status = 'failed' and w.next_attempt_at > now()))
      and (@organization_id::uuid is null or w.organization_id = @organization_id)
      and (@ids::text[] is null or w.id = any(@ids::text[]::uuid[]))
      and w.id not in (select x.id from exhausted x)
      and not exists (select 1 from external_integration_outbox a
                      where a.id = w.waiting_for_outbox_id and a.status in ('queued', 'failed', 'processing'))
    returning w.id
), conflicts as (
/*fragment:exhausted_conflict*/ select 1 /*end:exhausted_conflict*/
), command_event_rows as (
    select 'Command Dead-Lettered' as detail_type, e.id, e.organization_id, e.integration_connection_id,
        e.local_entity_type, e.local_entity_id, e.attempt_count, e.last_error
    from exhausted_rows e
), command_events as (
/*fragment:command_event*/ select 1 /*end:command_event*/
), forgotten as (
    delete from integration_outbox_starts st
    where ((st.created_at < now() - interval '10 minutes'
            and (@organization_id::uuid is null or st.organization_id = @organization_id)
            and not exists (select 1 from external_integration_outbox o
                            where o.id = st.outbox_id and o.claim_token = st.claim_token and o.status = 'processing'))
        -- The start of a row this statement ends (its lease expired with
        -- no attempt left) at once: a rerun of that row must know of it.
        or exists (select 1 from expired e where e.id = st.outbox_id and e.claim_token = st.claim_token))
    returning st.outbox_id, st.organization_id, st.attempt, st.started_at
), lost as (
    insert into external_integration_attempts (outbox_id, organization_id, attempt, started_at, outcome,
        provider_called, error_excerpt, outcome_unknown)
    select f.outbox_id, f.organization_id, coalesce(f.attempt, 0), f.started_at, 'lease_expired', true,
        'the push started this attempt and no result was recorded (its function crashed or ran out of time): '
        || 'the provider may have acted on it', true
    from forgotten f
    where f.started_at is not null
)
-- How many rows it ended, and whether any row in the scope is queued,
-- failed or processing: with none, a claim would find nothing, and the
-- dispatch run skips it (one probe of each claim index; the claim is the
-- costliest statement to plan on a new connection).
select (select count(*) from expired),
    exists (select 1 from woken) or exists (select 1 from unparked)
    or exists (select 1 from external_integration_outbox o
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
