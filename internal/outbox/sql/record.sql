-- Records the results of started jobs, fenced by their claim token, opens one
-- conflict per row that reached dead_letter, and appends one attempt-history
-- row per recorded result (a stale token records neither): the history costs
-- no statement of its own. Its circuit CTEs feed the connections' circuit
-- breakers from the recorded results (@circuit_signals: a provider call's
-- "success" or retryable "failure", or null; @failure_threshold:
-- CIRCUIT_FAILURE_THRESHOLD, 0: off; @cooldown_seconds: CIRCUIT_COOLDOWN):
-- see fragment/circuit.sql. Its connection state CTEs keep each connection's
-- failing period, disable it, open and resolve its conflicts and write the
-- events of what changed (@events_on, @failing_after_seconds,
-- @disable_after_seconds, @disable_min_span_seconds,
-- @command_failing_after_attempts): see fragment/connection_state.sql. Its arguments are one array per outcome field. It
-- returns the recorded ids, then one row per circuit that changed state (a
-- null id).

with res as (
    select * from unnest(@ids::text[]::uuid[], @organization_ids::text[]::uuid[], @claim_tokens::text[]::uuid[],
        @statuses::text[], @provider_references::text[], @provider_statuses::text[],
        @last_errors::text[], @retry_seconds::float8[], @conflict_types::text[], @conflict_summaries::text[],
        @location_ids::text[]::uuid[], @connection_ids::text[]::uuid[],
        @call_started_at::timestamptz[], @call_finished_at::timestamptz[], @provider_called::bool[],
        @http_statuses::int[], @uncharged::bool[])
        as r(id, organization_id, claim_token, status, provider_reference, provider_status,
            last_error, retry_seconds, conflict_type, conflict_summary, location_id, connection_id,
            started_at, finished_at, provider_called, http_status, uncharged)
), updated as (
    update external_integration_outbox o
    set status = res.status,
        -- An attempt the provider did not take for a reason of the
        -- connection's (its pause, a 429) is given back.
        attempt_count = case when res.uncharged then greatest(o.attempt_count - 1, 0) else o.attempt_count end,
        provider_reference = coalesce(res.provider_reference, o.provider_reference),
        provider_status = coalesce(res.provider_status, o.provider_status),
        last_error = coalesce(res.last_error, o.last_error),
        next_attempt_at = case when res.status in ('failed', 'processing')
            then now() + make_interval(secs => res.retry_seconds) end,
        completed_at = case when res.status in ('completed', 'unsupported') then now() else o.completed_at end,
        lease_expires_at = null,
        updated_at = now()
    from res
    where o.id = res.id and o.organization_id = res.organization_id
      and o.integration_connection_id is not distinct from res.connection_id
      and o.claim_token = res.claim_token
      and o.status = 'processing' and o.started_at is not null
      -- Recording ends the lease: a repeat of the same record (its commit
      -- acknowledgement lost) matches nothing and writes no second attempt.
      and o.lease_expires_at is not null
    returning o.id, o.organization_id, o.integration_connection_id, o.command_type,
        o.local_entity_type, o.local_entity_id, o.idempotency_key, o.status, o.last_error,
        o.attempt_count + case when res.uncharged then 1 else 0 end as attempt_count, o.started_at,
        res.conflict_type, res.conflict_summary, res.location_id, res.provider_reference, res.provider_status,
        res.last_error as attempt_error, res.started_at as call_started_at, res.finished_at,
        res.provider_called, res.http_status
), conflicts as (
    insert into external_integration_conflicts (organization_id, location_id, integration_connection_id,
        conflict_type, severity, local_entity_type, local_entity_id, summary, local_snapshot, outbox_id)
    select u.organization_id, u.location_id, u.integration_connection_id,
        u.conflict_type, 'high', u.local_entity_type, u.local_entity_id, u.conflict_summary,
        jsonb_build_object('outboxId', u.id, 'commandType', u.command_type,
            'idempotencyKey', u.idempotency_key, 'lastError', u.last_error),
        u.id
    from updated u
    where u.status = 'dead_letter'
    on conflict (outbox_id) where status = 'open' and outbox_id is not null do nothing
), attempts as (
    insert into external_integration_attempts (outbox_id, organization_id, attempt, started_at, finished_at,
        outcome, provider_called, http_status, error_excerpt, provider_reference, provider_status)
    select u.id, u.organization_id, u.attempt_count, coalesce(u.call_started_at, u.started_at),
        coalesce(u.finished_at, now()), u.status, coalesce(u.provider_called, false), u.http_status,
        left(u.attempt_error, 1000), u.provider_reference, u.provider_status
    from updated u
)/*fragment:circuit*//*fragment:connection_state*/
select id::text, null, null, null from updated
union all
select null, connection_id::text, transition, open_until from circuit_changes
