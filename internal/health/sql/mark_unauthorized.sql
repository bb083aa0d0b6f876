-- Marks the connection @connection_id of @organization_id unauthorized (its
-- grant must be renewed): the claim takes none of its rows, which keep their
-- attempts, until Reauthorized clears it. The first time only (a repeat
-- changes nothing): one connection_unauthorized conflict opens (unless one is
-- open, or the caller opened it: @conflict_id, kept as the connection's) and
-- one Connection Unauthorized event is written (@events_on). The
-- state row is locked first, so two callers at once decide this once. It
-- returns whether the connection exists and whether this call marked it.

with conn as (
    select c.id, c.organization_id, c.provider, c.location_id
    from integration_connections c
    where c.id = @connection_id::uuid and c.organization_id = @organization_id::uuid
), before as (
    select s.* from integration_outbox_connection_state s
    where s.connection_id = @connection_id::uuid
    for update
), plan as (
    select c.id, c.organization_id, c.provider, c.location_id, b.failing_since, b.last_error,
        b.unauthorized_since is null as marks,
        coalesce(b.unauthorized_conflict_id, @conflict_id::uuid) as unauthorized_conflict_id,
        case when b.unauthorized_conflict_id is null and @conflict_id::uuid is null then gen_random_uuid() end as new_conflict_id,
        left(coalesce(nullif(@reason::text, ''), 'the provider refused the connection''s grant'), 1000) as reason
    from conn c
    left join before b on true
), written as (
    insert into integration_outbox_connection_state as s (connection_id, organization_id, provider,
        unauthorized_since, unauthorized_reason, unauthorized_conflict_id, updated_at)
    select p.id, p.organization_id, p.provider, now(), p.reason,
        coalesce(p.unauthorized_conflict_id, p.new_conflict_id), now()
    from plan p
    where p.marks
    on conflict (connection_id) do update
    set provider = excluded.provider, unauthorized_since = excluded.unauthorized_since,
        unauthorized_reason = excluded.unauthorized_reason,
        unauthorized_conflict_id = excluded.unauthorized_conflict_id, updated_at = now()
), conflict as (
    insert into external_integration_conflicts (id, organization_id, location_id, integration_connection_id,
        conflict_type, severity, summary, local_snapshot, status)
    select p.new_conflict_id, p.organization_id, p.location_id, p.id, 'connection_unauthorized', 'high',
        integration_outbox_fit('The ' || coalesce(p.provider, '') || ' connection needs to be authorized again: ' || p.reason
            || '. Its commands are held, no attempt used, until its credentials are replaced.', 'external_integration_conflicts', 'summary'),
        jsonb_strip_nulls(jsonb_build_object('connectionId', p.id, 'provider', p.provider, 'reason', p.reason)),
        'open'
    from plan p
    where p.marks and p.new_conflict_id is not null
), event as (
    insert into integration_outbox_events (id, detail_type, organization_id, connection_id, detail)
    select e.id, 'Connection Unauthorized', p.organization_id, p.id,
        jsonb_strip_nulls(jsonb_build_object('eventId', e.id, 'organizationId', p.organization_id,
            'connectionId', p.id, 'provider', p.provider,
            'occurredAt', to_char(now() at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
            'failingSince', to_char(p.failing_since at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
            'lastError', p.reason))
    from plan p
    cross join (select gen_random_uuid() as id) e
    where p.marks and @events_on::bool
)
select exists (select 1 from conn), coalesce((select marks from plan), false)
