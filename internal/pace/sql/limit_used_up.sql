-- Pauses the connection @connection_id (of @organization_id) until @until
-- because its provider's daily call limit is used up (@reason: the
-- provider's answer), as pause.sql does, and opens one
-- connection_limit_reached conflict for the host to show (@summary). The
-- pace row is locked first, so that of containers answered at once only the
-- first opens it: a later one finds the row already paused to about the
-- same end (within a minute) and opens none; an open one of the connection
-- is not opened again. It returns the id of the conflict it opened, if any.

with conn as (
    select c.id, c.organization_id, c.location_id, c.provider
    from integration_connections c
    where c.id = @connection_id::uuid and c.organization_id = @organization_id::uuid
), before as (
    select p.paused_until from integration_outbox_connection_pace p
    where p.connection_id = @connection_id::uuid
    for update
), paused as (
    insert into integration_outbox_connection_pace as p (connection_id, organization_id, next_call_at,
        paused_until, pause_reason, updated_at)
    values (@connection_id::uuid, @organization_id::uuid, now(), @until::timestamptz, @reason::text, now())
    on conflict (connection_id) do update
    set paused_until = greatest(coalesce(p.paused_until, @until::timestamptz), @until::timestamptz),
        pause_reason = case when p.paused_until > @until::timestamptz then p.pause_reason else @reason::text end,
        updated_at = now()
    returning p.connection_id
), conflict as (
    insert into external_integration_conflicts (id, organization_id, location_id, integration_connection_id,
        conflict_type, severity, local_entity_type, local_entity_id, summary, local_snapshot, status)
    select gen_random_uuid(), c.organization_id, c.location_id, c.id, 'connection_limit_reached', 'medium',
        integration_outbox_fit('integration_connection', 'external_integration_conflicts', 'local_entity_type'), c.id,
        integration_outbox_fit(@summary::text, 'external_integration_conflicts', 'summary'),
        jsonb_build_object('connectionId', c.id, 'provider', c.provider,
            'pausedUntil', to_char(@until::timestamptz at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
            'reason', @reason::text),
        'open'
    from conn c
    where coalesce((select b.paused_until from before b), '-infinity') < @until::timestamptz - interval '1 minute'
      and not exists (select 1 from external_integration_conflicts x
          where x.integration_connection_id = c.id and x.conflict_type = 'connection_limit_reached'
            and x.status = 'open')
    returning id
)
select (select id::text from conflict), exists (select 1 from paused)
