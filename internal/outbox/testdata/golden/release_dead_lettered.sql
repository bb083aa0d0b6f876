
with req as (
    select * from unnest($1::text[]::uuid[], $2::text[]::uuid[], $3::text[]::uuid[], $4::text[]::uuid[])
        as r(id, organization_id, claim_token, connection_id)
), released as (
    update external_integration_outbox o
    set status = case when o.attempt_count >= $5 then 'dead_letter' else 'failed' end,
        last_error = left(case when o.attempt_count >= $5
                then 'attempts exhausted: the message of the last attempt reached the dead-letter queue (the push function failed on every delivery)'
                else 'the message of this attempt reached the dead-letter queue (the push function failed on every delivery); released for the next dispatch run'
            end || coalesce('; previous error: ' || o.last_error, ''), 1000),
        claim_token = null,
        lease_expires_at = null,
        next_attempt_at = case when o.attempt_count >= $5 then null else now() end,
        updated_at = now()
    from req
    where o.id = req.id and o.organization_id = req.organization_id
      and o.integration_connection_id is not distinct from req.connection_id
      and o.claim_token = req.claim_token
      and o.status = 'processing' and o.provider_status is null
      and (o.started_at is null or o.lease_expires_at < now())
    returning o.id, o.organization_id, o.integration_connection_id, o.command_type, o.local_entity_type,
        o.local_entity_id, o.idempotency_key, o.status, o.last_error, o.attempt_count, o.claimed_at, o.started_at
), conflicts as (
    insert into external_integration_conflicts (organization_id, location_id, integration_connection_id,
        conflict_type, severity, local_entity_type, local_entity_id, summary, local_snapshot, outbox_id)
    select r.organization_id, c.location_id, r.integration_connection_id,
        'provider_rejected', 'high', r.local_entity_type, r.local_entity_id,
        'External provider outbound command reached dead letter: attempts exhausted.',
        jsonb_build_object('outboxId', r.id, 'commandType', r.command_type,
            'idempotencyKey', r.idempotency_key, 'lastError', r.last_error),
        r.id
    from released r
    left join integration_connections c
        on c.id = r.integration_connection_id and c.organization_id = r.organization_id
    where r.status = 'dead_letter'
    on conflict (outbox_id) where status = 'open' and outbox_id is not null do nothing
), attempts as (
    insert into external_integration_attempts (outbox_id, organization_id, attempt, started_at, finished_at,
        outcome, provider_called, error_excerpt)
    select r.id, r.organization_id, r.attempt_count, coalesce(r.started_at, r.claimed_at), now(),
        r.status, r.started_at is not null, r.last_error
    from released r
)
select id::text, status from released