-- What every record writes for the rows it ended (updated): the claims'
-- starts deleted (no longer in flight), one attempt-history row each, and
-- the rows waiting for them woken. record.sql and record_completed.sql take
-- it, so a success recorded by either writes the same.
--
-- Stand-in context: the recorded outcomes (res) and the rows the record
-- updated (updated), with the columns the part reads.

with res as (
    select null::uuid as id
), updated as (
    select o.id, o.organization_id, o.claim_token, o.status, o.attempt_count, o.started_at,
        o.provider_reference, o.provider_status, null::text as attempt_error, null::timestamptz as call_started_at,
        null::timestamptz as finished_at, null::bool as provider_called, null::int as http_status,
        null::bool as outcome_unknown, null::text as note
    from external_integration_outbox o
    where false
), /*begin:record_ends*/
finished as (
    -- The recorded claims are no longer in flight.
    delete from integration_outbox_starts st
    using updated u
    where st.claim_token = u.claim_token
), attempts as (
    insert into external_integration_attempts (outbox_id, organization_id, attempt, started_at, finished_at,
        outcome, provider_called, http_status, error_excerpt, provider_reference, provider_status, outcome_unknown)
    select u.id, u.organization_id, u.attempt_count, coalesce(u.call_started_at, u.started_at),
        coalesce(u.finished_at, now()), u.status, coalesce(u.provider_called, false), u.http_status,
        left(nullif(concat_ws('; ', u.attempt_error, u.note), ''), 1000), u.provider_reference, u.provider_status,
        u.outcome_unknown or null
    from updated u
), woken as (
    -- A row that ends (completed, uncertain, unsupported, dead_letter)
    -- makes the rows waiting for it (waiting_for_outbox_id) due now, their
    -- command's load then finds what they waited for. Rows of this record
    -- are its own. How a row wakes (due since its creation; a parked
    -- follower back into the claim's walk index): fragment/wake.sql.
    --
    -- Each ended row's waiters are found by a probe of the waiting index
    -- (the lateral x, kept a subquery by its offset 0, run once per ended
    -- row), and updated by their id. As a join of w with the ended rows,
    -- the plan read the whole waiting index (every parked follower) at
    -- every record, where the statistics, those of before the followers
    -- were parked until autovacuum analyzes the table again, say that few
    -- rows wait (TestEndingRowsReadsNoParkedFollowerOfOthers). So w has no
    -- condition the waiting index could serve: what it waits for is checked
    -- again on the row updated (a concurrent change) with "is not distinct
    -- from", which no index or hash serves (u.id is never null: the same
    -- as =).
    update external_integration_outbox w
    set /*fragment:wake*/ updated_at = now() /*end:wake*/
    from updated u
    cross join lateral (
        select x.id from external_integration_outbox x
        where x.waiting_for_outbox_id is not null and x.waiting_for_outbox_id = u.id
          and x.organization_id = u.organization_id
          and x.status in ('queued', 'failed')
        offset 0) x
    where w.id = x.id
      and w.waiting_for_outbox_id is not distinct from u.id
      and w.organization_id = u.organization_id
      and u.status::text not in ('queued', 'failed', 'processing')
      and w.status in ('queued', 'failed')
      and w.id not in (select r.id from res r)
)
/*end:record_ends*/
select 1
