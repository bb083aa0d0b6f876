
with res as (
    select * from unnest(@ids::text[]::uuid[], @organization_ids::text[]::uuid[], @claim_tokens::text[]::uuid[],
        @statuses::text[], @provider_references::text[], @provider_statuses::text[],
        @last_errors::text[], @retry_seconds::float8[], @conflict_types::text[], @conflict_summaries::text[],
        @location_ids::text[]::uuid[], @connection_ids::text[]::uuid[],
        @call_started_at::timestamptz[], @call_finished_at::timestamptz[], @provider_called::bool[],
        @http_statuses::int[])
        as r(id, organization_id, claim_token, status, provider_reference, provider_status,
            last_error, retry_seconds, conflict_type, conflict_summary, location_id, connection_id,
            started_at, finished_at, provider_called, http_status)
), updated as (
    update external_integration_outbox o
    set status = res.status,
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
        o.attempt_count, o.started_at,
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
), circuit_signals as (
    select u.organization_id, u.integration_connection_id as connection_id,
        count(*) filter (where r.circuit = 'failure') as failures,
        bool_or(r.circuit = 'success') as succeeded
    from updated u
    join unnest(@ids::text[]::uuid[], @circuit_signals::text[]) as r(id, circuit) on r.id = u.id
    where @failure_threshold::int > 0 and u.integration_connection_id is not null and r.circuit is not null
    group by u.organization_id, u.integration_connection_id
), circuit_before as (
    select h.connection_id, h.open_until
    from integration_outbox_connection_health h
    where h.connection_id in (select connection_id from circuit_signals)
), circuit_after as (
    insert into integration_outbox_connection_health as h (connection_id, organization_id,
        consecutive_failures, opened_count, open_until, opened_at, updated_at)
    select s.connection_id, s.organization_id,
        case when s.succeeded then 0 else s.failures end,
        case when not s.succeeded and s.failures >= @failure_threshold then 1 else 0 end,
        case when not s.succeeded and s.failures >= @failure_threshold then now() + make_interval(secs => @cooldown_seconds) end,
        case when not s.succeeded and s.failures >= @failure_threshold then now() end,
        now()
    from circuit_signals s
    where not s.succeeded or exists (select 1 from circuit_before b where b.connection_id = s.connection_id)
    order by s.connection_id
    on conflict (connection_id) do update
    set consecutive_failures = case when excluded.consecutive_failures = 0 then 0
            else h.consecutive_failures + excluded.consecutive_failures end,
        open_until = case
            when excluded.consecutive_failures = 0 then null
            when h.open_until is null then case
                when h.consecutive_failures + excluded.consecutive_failures >= @failure_threshold
                then now() + make_interval(secs => @cooldown_seconds) end
            when h.open_until > now() then h.open_until
            else now() + make_interval(secs => least(@cooldown_seconds * power(2, least(h.opened_count, 20)), greatest(@cooldown_seconds, 3600)))
        end,
        opened_count = case
            when excluded.consecutive_failures = 0 then 0
            when h.open_until is null then case
                when h.consecutive_failures + excluded.consecutive_failures >= @failure_threshold then 1 else 0 end
            when h.open_until > now() then h.opened_count
            else h.opened_count + 1
        end,
        opened_at = case
            when excluded.consecutive_failures = 0 then null
            when h.open_until is null or h.open_until <= now() then case
                when h.open_until is not null or h.consecutive_failures + excluded.consecutive_failures >= @failure_threshold
                then now() else h.opened_at end
            else h.opened_at
        end,
        updated_at = now()
    where excluded.consecutive_failures > 0 or h.consecutive_failures > 0 or h.open_until is not null
    returning h.connection_id, h.open_until
), circuit_changes as (
    select a.connection_id, a.open_until,
        case when a.open_until is null then 'closed'
             when b.open_until is null then 'opened'
             else 'reopened' end as transition
    from circuit_after a
    left join circuit_before b on b.connection_id = a.connection_id
    where (a.open_until is null) <> (b.open_until is null)
       or (b.open_until <= now() and a.open_until > now())
)
select id::text, null, null, null from updated
union all
select null, connection_id::text, transition, open_until from circuit_changes