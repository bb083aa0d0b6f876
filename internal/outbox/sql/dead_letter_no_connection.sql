-- Ends claimed rows that have no integration connection: nothing can deliver
-- them and no attempt would change that, so they go to dead_letter at once
-- with the attempt given back and their one open configuration_invalid
-- conflict and Command Dead-Lettered event (@events_on). Fenced like
-- release.sql. The claims come as one array per column:
-- @ids, @organization_ids, @claim_tokens.

with ended as (
    update external_integration_outbox o
    set status = 'dead_letter',
        attempt_count = greatest(o.attempt_count - 1, 0),
        last_error = integration_outbox_fit('integration_connection_id: missing: the command names no integration connection', 'external_integration_outbox', 'last_error'),
        lease_expires_at = null,
        next_attempt_at = null,
        updated_at = now()
    from unnest(@ids::text[]::uuid[], @organization_ids::text[]::uuid[], @claim_tokens::text[]::uuid[]) as r(id, organization_id, claim_token)
    where o.id = r.id and o.organization_id = r.organization_id
      and o.integration_connection_id is null
      and o.claim_token = r.claim_token and o.status = 'processing' and o.started_at is null
      -- No message was sent for these claims; none is started.
      and not exists (select 1 from integration_outbox_starts st where st.claim_token = r.claim_token)
    returning o.*
), conflicts as (
    insert into external_integration_conflicts (organization_id, location_id, integration_connection_id,
        conflict_type, severity, local_entity_type, local_entity_id, summary, local_snapshot, outbox_id)
    select e.organization_id, null::uuid, null::uuid,
        'configuration_invalid', 'high', integration_outbox_fit(e.local_entity_type, 'external_integration_conflicts', 'local_entity_type'), e.local_entity_id,
        integration_outbox_fit('External provider outbound command reached dead letter (configuration_invalid): ' || e.last_error, 'external_integration_conflicts', 'summary'),
        jsonb_build_object('outboxId', e.id, 'commandType', e.command_type,
            'idempotencyKey', e.idempotency_key, 'lastError', e.last_error),
        e.id
    from ended e
    on conflict (outbox_id) where status = 'open' and outbox_id is not null do nothing
), command_event_rows as (
    select 'Command Dead-Lettered' as detail_type, e.id, e.organization_id, e.integration_connection_id,
        e.local_entity_type, e.local_entity_id, e.attempt_count, e.last_error
    from ended e
), command_events as (
/*fragment:command_event*/ select 1 /*end:command_event*/
)
select count(*) from ended
