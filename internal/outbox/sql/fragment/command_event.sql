-- Writes one event per row of the statement's CTE command_event_rows
-- (detail_type, id, organization_id, integration_connection_id,
-- local_entity_type, local_entity_id, attempt_count, last_error) into
-- integration_outbox_events, for the dispatch run to publish; nothing when
-- events are off (@events_on false). The eventId is the event row's id.
--
-- Stand-in context: command_event_rows.

with command_event_rows as (
    select null::text as detail_type, id, organization_id, integration_connection_id, local_entity_type,
        local_entity_id, attempt_count, last_error
    from external_integration_outbox limit 0
)
/*begin:command_event*/
    insert into integration_outbox_events (id, detail_type, organization_id, connection_id, detail)
    select e.event_id, e.detail_type, e.organization_id, e.integration_connection_id,
        jsonb_strip_nulls(jsonb_build_object('eventId', e.event_id, 'organizationId', e.organization_id,
            'connectionId', e.integration_connection_id, 'provider', c.provider,
            'occurredAt', to_char(now() at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
            'outboxId', e.id, 'localEntityType', e.local_entity_type, 'localEntityId', e.local_entity_id,
            'attempt', e.attempt_count, 'lastError', e.last_error))
    from (select gen_random_uuid() as event_id, r.* from command_event_rows r) e
    left join integration_connections c
        on c.id = e.integration_connection_id and c.organization_id = e.organization_id
    where @events_on::bool
/*end:command_event*/
