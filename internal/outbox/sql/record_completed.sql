-- Records the results of started jobs that all completed, none of them a
-- failure (Store.Record sends a batch here when every outcome is completed,
-- its circuit a success or none, its attempt charged and nothing awaited):
-- record.sql without the parts such a batch never writes (a conflict, a
-- circuit's failure, a connection's failing period, an event): 4 writes
-- on 3 tables where record.sql sets up 11 on 7 at every call, and a plan
-- a fraction of its size to make again after each ANALYZE. Its
-- rows are fenced as record.sql's are (the claim token and its start),
-- and what it writes for them is record.sql's (fragment/record_ends.sql:
-- the starts deleted, one attempt-history row each, their waiting rows
-- woken).
--
-- A success changes a connection's circuit or state only where there is
-- something to clear: consecutive failures or an open circuit
-- (integration_outbox_connection_health), a failing period, a disable or
-- an unauthorized mark and their conflicts (integration_outbox_connection_state).
-- Where a connection of the batch has one, the statement writes nothing
-- and returns one row (null id, held true): Store.Record then sends the
-- batch to record.sql, which clears them under the state row's lock. A
-- failure committed after this statement's snapshot is decided by its own
-- record as after a success that wrote nothing, which is what record.sql
-- writes for a success on a connection with nothing to clear: the two are
-- ordered, success first. It returns the recorded ids (held false).

with res as (
    select * from jsonb_to_recordset(@outcomes::jsonb)
        as r(id uuid, organization_id uuid, claim_token uuid, provider_reference text, provider_status text,
            last_error text, connection_id uuid, started_at timestamptz, finished_at timestamptz,
            provider_called bool, http_status int, outcome_unknown bool, note text)
), held as (
    select exists (
        select 1 from integration_outbox_connection_health h
        where h.connection_id in (select r.connection_id from res r)
          and (h.consecutive_failures > 0 or h.open_until is not null)
    ) or exists (
        select 1 from integration_outbox_connection_state s
        where s.connection_id in (select r.connection_id from res r)
          and (s.failing_since is not null or s.disabled_at is not null or s.unauthorized_since is not null
            or s.failing_conflict_id is not null or s.disabled_conflict_id is not null
            or s.unauthorized_conflict_id is not null)
    ) as held
), updated as (
    update external_integration_outbox o
    -- The host's status may be an enum: 'completed' becomes its type.
    set status = integration_outbox_as('completed', o.status),
        -- Store.Record has cut the texts to the host's columns (text_lengths.sql).
        provider_reference = coalesce(res.provider_reference, o.provider_reference),
        provider_status = coalesce(res.provider_status, o.provider_status),
        last_error = coalesce(res.last_error, o.last_error),
        next_attempt_at = null,
        waiting_for_outbox_id = null,
        completed_at = now(),
        lease_expires_at = null,
        started_at = st.started_at,
        updated_at = now()
    from res join integration_outbox_starts st on /*fragment:record_fence*/ true
    where o.id = res.id /*end:record_fence*/
      and not (select h.held from held h)
    returning o.id, o.organization_id, o.claim_token, o.status, o.attempt_count, o.started_at,
        res.provider_reference, res.provider_status, res.last_error as attempt_error,
        res.started_at as call_started_at, res.finished_at, res.provider_called, res.http_status,
        res.outcome_unknown, res.note
), /*fragment:record_ends*/ finished as (select 1), attempts as (select 1), woken as (select 1) /*end:record_ends*/
select id::text, false from updated
union all
select null, true from held where held
