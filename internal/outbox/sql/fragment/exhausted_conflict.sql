-- Opens the provider_rejected conflict of each row in the statement's CTE
-- exhausted_rows (rows just moved to dead_letter with their attempts used
-- up), one open conflict per row.
--
-- Stand-in context: exhausted_rows, outbox rows.

with exhausted_rows as (
    select * from external_integration_outbox limit 0
)
/*begin:exhausted_conflict*/
    insert into external_integration_conflicts (organization_id, location_id, integration_connection_id,
        conflict_type, severity, local_entity_type, local_entity_id, summary, local_snapshot, outbox_id)
    select e.organization_id, c.location_id, e.integration_connection_id,
        'provider_rejected', 'high', integration_outbox_fit(e.local_entity_type, 'external_integration_conflicts', 'local_entity_type'), e.local_entity_id,
        integration_outbox_fit('External provider outbound command reached dead letter: attempts exhausted.', 'external_integration_conflicts', 'summary'),
        jsonb_build_object('outboxId', e.id, 'commandType', e.command_type,
            'idempotencyKey', e.idempotency_key, 'lastError', e.last_error),
        e.id
    from exhausted_rows e
    left join integration_connections c
        on c.id = e.integration_connection_id and c.organization_id = e.organization_id
    on conflict (outbox_id) where status = 'open' and outbox_id is not null do nothing
/*end:exhausted_conflict*/
