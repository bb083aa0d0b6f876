-- Records the results of started jobs, fenced by their claim token and its
-- start (integration_outbox_starts, which the record deletes: a repeat of
-- the same record matches nothing; the row's started_at keeps when it
-- started), opens one
-- conflict per row that reached dead_letter, and appends one attempt-history
-- row per recorded result (a stale token records neither): the history costs
-- no statement of its own. Its circuit CTEs feed the connections' circuit
-- breakers from the recorded results (each outcome's circuit: a provider call's
-- "success" or retryable "failure", or null; @failure_threshold:
-- CIRCUIT_FAILURE_THRESHOLD, 0: off; @cooldown_seconds: CIRCUIT_COOLDOWN):
-- see its circuit_ CTEs below. Its connection state CTEs keep each connection's
-- failing period, disable it, open and resolve its conflicts and write the
-- events of what changed (@events_on, @failing_after_seconds,
-- @disable_after_seconds, @disable_min_span_seconds,
-- @command_failing_after_attempts): see its state_ CTEs below. Its
-- outcomes come as one JSON array, typed by jsonb_to_recordset (@outcomes:
-- Store.Record's recordRow). It returns the recorded ids, then one row per
-- circuit that changed state (a null id). A row recorded as waiting for
-- another (a dependency, not a failure: uncharged) names it; its woken CTE
-- makes the rows waiting for a row that ends due at once.

with res as (
    select * from jsonb_to_recordset(@outcomes::jsonb)
        as r(id uuid, organization_id uuid, claim_token uuid, status text, provider_reference text,
            provider_status text, last_error text, retry_seconds float8, conflict_type text, conflict_summary text,
            location_id uuid, connection_id uuid, started_at timestamptz, finished_at timestamptz,
            provider_called bool, http_status int, circuit text, uncharged bool, outcome_unknown bool, no_conflict bool, note text,
            waiting_for uuid)
), updated as (
    update external_integration_outbox o
    -- The host's status may be an enum: res.status becomes its type.
    set status = integration_outbox_as(res.status, o.status),
        -- An attempt the provider did not take for a reason of the
        -- connection's (its pause, a 429) is given back.
        attempt_count = case when res.uncharged then greatest(o.attempt_count - 1, 0) else o.attempt_count end,
        -- Store.Record has cut the texts to the host's columns (text_lengths.sql).
        provider_reference = coalesce(res.provider_reference, o.provider_reference),
        provider_status = coalesce(res.provider_status, o.provider_status),
        last_error = coalesce(res.last_error, o.last_error),
        -- A row waiting for another (res.waiting_for) is due at once when
        -- that one is no longer queued, failed or processing: its end was
        -- recorded before this row named it (the wake below missed it).
        next_attempt_at = case when res.status in ('failed', 'processing')
            then now() + make_interval(secs => case when res.waiting_for is null or exists (
                select 1 from external_integration_outbox w
                where w.id = res.waiting_for and w.status in ('queued', 'failed', 'processing'))
            then res.retry_seconds else 0 end) end,
        waiting_for_outbox_id = res.waiting_for,
        completed_at = case when res.status in ('completed', 'unsupported') then now() else o.completed_at end,
        lease_expires_at = null,
        started_at = st.started_at,
        updated_at = now()
    from res join integration_outbox_starts st on /*fragment:record_fence*/ true
    where o.id = res.id /*end:record_fence*/
    returning o.id, o.organization_id, o.integration_connection_id, o.command_type, o.claim_token,
        o.local_entity_type, o.local_entity_id, o.idempotency_key, o.status, o.last_error,
        o.attempt_count + case when res.uncharged then 1 else 0 end as attempt_count, o.started_at,
        res.conflict_type, res.conflict_summary, res.location_id, res.provider_reference, res.provider_status,
        res.last_error as attempt_error, res.started_at as call_started_at, res.finished_at,
        res.provider_called, res.http_status, res.outcome_unknown, res.no_conflict, res.note
), conflicts as (
    insert into external_integration_conflicts (organization_id, location_id, integration_connection_id,
        conflict_type, severity, local_entity_type, local_entity_id, summary, local_snapshot, outbox_id)
    select u.organization_id, u.location_id, u.integration_connection_id,
        u.conflict_type, 'high', integration_outbox_fit(u.local_entity_type, 'external_integration_conflicts', 'local_entity_type'), u.local_entity_id,
        integration_outbox_fit(u.conflict_summary, 'external_integration_conflicts', 'summary'),
        jsonb_build_object('outboxId', u.id, 'commandType', u.command_type,
            'idempotencyKey', u.idempotency_key, 'lastError', u.last_error),
        u.id
    from updated u
    where u.status = 'dead_letter' and not coalesce(u.no_conflict, false)
    on conflict (outbox_id) where status = 'open' and outbox_id is not null do nothing
), /*fragment:record_ends*/ finished as (select 1), attempts as (select 1), woken as (select 1) /*end:record_ends*/
-- The circuit breaker: per connection, a recorded success
-- closes its circuit; retryable failures add to its consecutive failures, and
-- open the circuit for @cooldown_seconds once they reach @failure_threshold.
-- A failure once the cooldown is over (the probe's) opens it again for twice
-- the previous cooldown, at most an hour. A success where nothing failed
-- writes nothing. Rows are locked in connection order (no deadlock between
-- concurrent batches).
, circuit_signals as (
    select u.organization_id, u.integration_connection_id as connection_id,
        count(*) filter (where r.circuit = 'failure') as failures,
        bool_or(r.circuit = 'success') as succeeded
    from updated u
    join res r on r.id = u.id
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
-- The connection state, independent of the circuit breaker:
-- per connection, from the recorded provider calls (each outcome's circuit: a
-- retryable failure or an answer of the provider; a permanent rejection is
-- an answer, the command's fault, not the connection's):
--
-- - a failure starts (failing_since) or continues its failing period; once
--   it has lasted @failing_after_seconds (CONNECTION_FAILING_AFTER) one
--   connection_failing conflict opens; once it has lasted
--   @disable_after_seconds (CONNECTION_DISABLE_AFTER, 0: never) and at least
--   @disable_min_span_seconds (CONNECTION_DISABLE_MIN_SPAN) lie between its
--   first and this failure (both counted from enabled_at instead when an
--   operator enabled it since), the connection is disabled (the claim leaves its
--   rows alone, fragment/connection_room.sql), one connection_disabled
--   conflict opens and one Connection Disabled event is written;
-- - an answer ends the failing period; if the connection was failing long
--   enough for a conflict, disabled or unauthorized, its conflicts are
--   resolved and one Connection Recovered event is written.
--
-- Each connection's state row is locked (in connection order) and read at its
-- latest version before anything is decided, so a transition is decided, and
-- its event and conflict written, once. The conflicts' ids are chosen here
-- and kept in the state row: the conflicts table has no unique index that
-- would keep a connection's conflicts to one open row. Command events: one
-- Command Failing when a row failed its @command_failing_after_attempts-th
-- attempt (an uncharged try does not count), one Command Dead-Lettered per
-- row that ended dead_letter. Events are written only with @events_on.
, state_signals as (
    select u.organization_id, u.integration_connection_id as connection_id,
        count(*) filter (where r.circuit = 'failure') as failures,
        bool_or(r.circuit = 'success') as succeeded,
        (array_agg(u.last_error order by u.id) filter (where r.circuit = 'failure'))[1] as last_error
    from updated u
    join res r on r.id = u.id
    where u.integration_connection_id is not null and r.circuit is not null
    group by u.organization_id, u.integration_connection_id
), state_before as (
    select s.* from integration_outbox_connection_state s
    where s.connection_id in (select connection_id from state_signals)
    order by s.connection_id
    for update
), state_decided as (
    select g.connection_id, g.organization_id, c.provider, c.location_id, g.succeeded,
        b.connection_id is not null as existed, b.failing_since as failing_since_before,
        b.failing_conflict_id as failing_conflict_before, b.disabled_conflict_id as disabled_conflict_before,
        b.unauthorized_conflict_id as unauthorized_conflict_before,
        case when g.succeeded then null else coalesce(b.failing_since, now()) end as failing_since,
        case when g.succeeded then b.last_failure_at else now() end as last_failure_at,
        case when g.succeeded then now() else b.last_success_at end as last_success_at,
        case when g.succeeded then b.last_error else coalesce(g.last_error, b.last_error) end as last_error,
        g.succeeded and (b.failing_conflict_id is not null or b.disabled_conflict_id is not null
            or b.unauthorized_conflict_id is not null or b.disabled_at is not null
            or b.unauthorized_since is not null) as recovering,
        not g.succeeded and b.failing_conflict_id is null
            and now() - coalesce(b.failing_since, now()) >= make_interval(secs => @failing_after_seconds) as opens_failing,
        not g.succeeded and @disable_after_seconds::float8 > 0 and b.disabled_at is null and b.failing_since is not null
            and now() - greatest(b.failing_since, coalesce(b.enabled_at, b.failing_since)) >= make_interval(secs => @disable_after_seconds)
            and now() - greatest(b.failing_since, coalesce(b.enabled_at, b.failing_since)) >= make_interval(secs => @disable_min_span_seconds) as disables,
        b.disabled_at, b.disabled_reason, b.unauthorized_since, b.unauthorized_reason,
        b.failing_conflict_id, b.disabled_conflict_id, b.unauthorized_conflict_id
    from state_signals g
    left join state_before b on b.connection_id = g.connection_id
    left join integration_connections c on c.id = g.connection_id and c.organization_id = g.organization_id
), state_plan as (
    select d.*,
        case when d.opens_failing then gen_random_uuid() end as new_failing_conflict_id,
        case when d.disables and d.disabled_conflict_id is null then gen_random_uuid() end as new_disabled_conflict_id
    from state_decided d
), state_written as (
    insert into integration_outbox_connection_state as s (connection_id, organization_id, provider,
        failing_since, last_failure_at, last_success_at, last_error, disabled_at, disabled_reason,
        unauthorized_since, unauthorized_reason, failing_conflict_id, disabled_conflict_id,
        unauthorized_conflict_id, updated_at)
    select p.connection_id, p.organization_id, p.provider,
        p.failing_since, p.last_failure_at, p.last_success_at, p.last_error,
        case when p.succeeded then null when p.disables then now() else p.disabled_at end,
        case when p.succeeded then null
             when p.disables then left('every provider call failed with a retryable error since '
                 || to_char(p.failing_since_before at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"')
                 || coalesce('; last error: ' || p.last_error, ''), 1000)
             else p.disabled_reason end,
        case when p.succeeded then null else p.unauthorized_since end,
        case when p.succeeded then null else p.unauthorized_reason end,
        case when p.succeeded then null else coalesce(p.failing_conflict_id, p.new_failing_conflict_id) end,
        case when p.succeeded then null else coalesce(p.disabled_conflict_id, p.new_disabled_conflict_id) end,
        case when p.succeeded then null else p.unauthorized_conflict_id end,
        now()
    from state_plan p
    -- A success of a connection with nothing to clear writes nothing.
    where not p.succeeded or (p.existed and (p.recovering or p.failing_since_before is not null))
    order by p.connection_id
    on conflict (connection_id) do update
    set provider = excluded.provider, failing_since = excluded.failing_since,
        last_failure_at = excluded.last_failure_at, last_success_at = excluded.last_success_at,
        last_error = excluded.last_error, disabled_at = excluded.disabled_at,
        disabled_reason = excluded.disabled_reason, unauthorized_since = excluded.unauthorized_since,
        unauthorized_reason = excluded.unauthorized_reason, failing_conflict_id = excluded.failing_conflict_id,
        disabled_conflict_id = excluded.disabled_conflict_id,
        unauthorized_conflict_id = excluded.unauthorized_conflict_id, updated_at = now()
    returning s.connection_id
), state_conflicts_opened as (
    insert into external_integration_conflicts (id, organization_id, location_id, integration_connection_id,
        conflict_type, severity, summary, local_snapshot, status)
    select k.id, p.organization_id, p.location_id, p.connection_id, k.conflict_type, k.severity,
        integration_outbox_fit(left(k.summary, 2000), 'external_integration_conflicts', 'summary'),
        jsonb_strip_nulls(jsonb_build_object('connectionId', p.connection_id, 'provider', p.provider,
            'failingSince', p.failing_since, 'lastError', p.last_error)),
        'open'
    from state_plan p
    cross join lateral (values
        (p.new_failing_conflict_id, 'connection_failing', 'medium',
         'The ' || coalesce(p.provider, '') || ' connection has failed on every call since '
            || to_char(p.failing_since at time zone 'UTC', 'YYYY-MM-DD HH24:MI "UTC"')
            || '. Its commands are retried'
            || case when @disable_after_seconds::float8 > 0
                then '; if every call still fails at '
                    || to_char((p.failing_since + make_interval(secs => @disable_after_seconds)) at time zone 'UTC', 'YYYY-MM-DD HH24:MI "UTC"')
                    || ' it will be disabled'
                else '' end
            || '. Last error: '
            || coalesce(p.last_error, 'none recorded')),
        (p.new_disabled_conflict_id, 'connection_disabled', 'high',
         'The ' || coalesce(p.provider, '') || ' connection was disabled: every call has failed since '
            || to_char(p.failing_since at time zone 'UTC', 'YYYY-MM-DD HH24:MI "UTC"')
            || '. Its commands are held, no attempt used, until an operator enables it again. Last error: '
            || coalesce(p.last_error, 'none recorded'))
    ) as k(id, conflict_type, severity, summary)
    where k.id is not null
), state_conflicts_resolved as (
    update external_integration_conflicts k
    set status = 'resolved', resolved_at = now(),
        resolution_reason = 'the connection delivers again'
    from state_plan p
    where p.recovering and k.status = 'open' and k.organization_id = p.organization_id
      and k.id in (p.failing_conflict_before, p.disabled_conflict_before, p.unauthorized_conflict_before)
), state_events as (
    insert into integration_outbox_events (id, detail_type, organization_id, connection_id, detail)
    select e.event_id, e.detail_type, p.organization_id, p.connection_id,
        jsonb_strip_nulls(jsonb_build_object('eventId', e.event_id, 'organizationId', p.organization_id,
            'connectionId', p.connection_id, 'provider', p.provider,
            'occurredAt', to_char(now() at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
            'failingSince', to_char(p.failing_since_before at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
            'lastError', p.last_error))
    from state_plan p
    cross join lateral (values
        (case when p.disables then gen_random_uuid() end, 'Connection Disabled'),
        (case when p.recovering then gen_random_uuid() end, 'Connection Recovered')
    ) as e(event_id, detail_type)
    where @events_on::bool and e.event_id is not null
), command_event_rows as (
    select case when u.status = 'dead_letter' then 'Command Dead-Lettered' else 'Command Failing' end as detail_type,
        u.id, u.organization_id, u.integration_connection_id, u.local_entity_type, u.local_entity_id,
        u.attempt_count, u.last_error
    from updated u
    join res r on r.id = u.id
    where u.status = 'dead_letter'
       or (u.status = 'failed' and not r.uncharged and u.attempt_count = @command_failing_after_attempts::int)
), command_events as (
/*fragment:command_event*/ select 1 /*end:command_event*/
)
select id::text, null, null, null from updated
union all
select null, connection_id::text, transition, open_until from circuit_changes
