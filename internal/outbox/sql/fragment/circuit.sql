-- record.sql's circuit breaker part: per connection, a recorded success
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
