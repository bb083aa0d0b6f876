-- Releases the rows whose command messages reached the command queue's
-- dead-letter queue: the push function failed on every delivery of that
-- message, so nothing will start the claim, yet the row would keep its lease
-- (and its place in the in-flight caps) until LEASE_SECONDS ran out.
--
-- The messages come as one array per field: @ids, @organization_ids,
-- @claim_tokens, @connection_ids.
--
-- A row is released only while it is still the claim of that message: status
-- processing, the same claim token, organization and connection, no provider
-- answer recorded (an accepted row awaits its follow-up), and either not
-- started (no start of its token in integration_outbox_starts) or started
-- with its lease over (a started job's lease lasts to the end of the push,
-- so a push still running is never released under it: that would let the
-- next claim call the provider concurrently). A stale or repeated
-- message matches nothing.
--
-- The release keeps the attempt the claim counted and drops the claim: a row
-- with attempts left becomes failed and due now (the next dispatch run claims
-- it again, with the same idempotency key); a row with none left
-- (@max_attempts: MAX_ATTEMPTS) goes to dead_letter with its one open
-- conflict and its Command Dead-Lettered event (@events_on), as an expired
-- lease with no attempts left does. Each release
-- appends one attempt-history row; provider_called and outcome_unknown are
-- set when the push had started, since its call may have reached the
-- provider (a later attempt looks the document up first), and deletes the
-- claim's start, which no record will.

with req as (
    select * from unnest(@ids::text[]::uuid[], @organization_ids::text[]::uuid[], @claim_tokens::text[]::uuid[], @connection_ids::text[]::uuid[])
        as r(id, organization_id, claim_token, connection_id)
), released as (
    update external_integration_outbox o
    set status = integration_outbox_as(case when o.attempt_count >= @max_attempts then 'dead_letter' else 'failed' end, o.status),
        last_error = integration_outbox_fit(left(case when o.attempt_count >= @max_attempts
                then 'attempts exhausted: the message of the last attempt reached the dead-letter queue (the push function failed on every delivery)'
                else 'the message of this attempt reached the dead-letter queue (the push function failed on every delivery); released for the next dispatch run'
            end || coalesce('; previous error: ' || o.last_error, ''), 1000), 'external_integration_outbox', 'last_error'),
        claim_token = null,
        lease_expires_at = null,
        next_attempt_at = case when o.attempt_count >= @max_attempts then null else now() end,
        updated_at = now()
    from req
    left join integration_outbox_starts st
        on st.claim_token = req.claim_token and st.outbox_id = req.id and st.started_at is not null
    where o.id = req.id and o.organization_id = req.organization_id
      and o.integration_connection_id is not distinct from req.connection_id
      and o.claim_token = req.claim_token
      and o.status = 'processing' and o.provider_status is null
      and (coalesce(st.started_at, o.started_at) is null or o.lease_expires_at < now())
    returning o.id, o.organization_id, o.integration_connection_id, o.command_type, o.local_entity_type,
        o.local_entity_id, o.idempotency_key, o.status, o.last_error, o.attempt_count, o.claimed_at,
        coalesce(st.started_at, o.started_at) as started_at
), exhausted_rows as (
    select * from released where status = 'dead_letter'
), conflicts as (
/*fragment:exhausted_conflict*/ select 1 /*end:exhausted_conflict*/
), command_event_rows as (
    select 'Command Dead-Lettered' as detail_type, e.id, e.organization_id, e.integration_connection_id,
        e.local_entity_type, e.local_entity_id, e.attempt_count, e.last_error
    from exhausted_rows e
), command_events as (
/*fragment:command_event*/ select 1 /*end:command_event*/
), attempts as (
    insert into external_integration_attempts (outbox_id, organization_id, attempt, started_at, finished_at,
        outcome, provider_called, error_excerpt, outcome_unknown)
    select r.id, r.organization_id, r.attempt_count, coalesce(r.started_at, r.claimed_at), now(),
        r.status, r.started_at is not null, r.last_error, r.started_at is not null or null
    from released r
), consumed as (
    delete from integration_outbox_starts st
    using req
    where st.claim_token = req.claim_token and st.outbox_id = req.id
      and req.id in (select r.id from released r)
)
select id::text, status from released
