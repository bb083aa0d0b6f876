package outbox

// Every statement on the outbox aggregate lives here. Each is scoped by
// organization_id, and every write that follows a claim is fenced by the
// claim_token the claim handed out.

// claimSQL claims up to $1 rows, oldest first: due rows of the claimable
// states; rows whose lease expired before the provider accepted them (crash
// recovery); and rows the provider accepted whose follow-up is due (pushed
// again with the same idempotency key, so the provider can say it is done).
// $2 MAX_ATTEMPTS, $3 lease seconds, $4 optional organization, $5 optional id
// list (a rerun's dispatchNow).
const claimSQL = `
with due as (
    select id, created_at from external_integration_outbox
    where status in ('queued', 'failed')
      and coalesce(next_attempt_at, now()) <= now()
      and attempt_count < $2
      and ($4::uuid is null or organization_id = $4)
      and ($5::text[] is null or id = any($5::text[]::uuid[]))
    order by created_at
    limit $1
    for update skip locked
), expired as (
    select id, created_at from external_integration_outbox
    where status = 'processing' and provider_status is null
      and lease_expires_at < now()
      and attempt_count < $2
      and ($4::uuid is null or organization_id = $4)
      and ($5::text[] is null or id = any($5::text[]::uuid[]))
    order by created_at
    limit $1
    for update skip locked
), follow_up as (
    select id, created_at from external_integration_outbox
    where status = 'processing' and provider_status is not null
      and next_attempt_at <= now()
      and attempt_count < $2
      and ($4::uuid is null or organization_id = $4)
      and ($5::text[] is null or id = any($5::text[]::uuid[]))
    order by created_at
    limit $1
    for update skip locked
), picked as (
    select id from (select * from due union all select * from expired union all select * from follow_up) candidates
    order by created_at
    limit $1
)
update external_integration_outbox o
set status = 'processing',
    attempt_count = o.attempt_count + 1,
    claim_token = gen_random_uuid(),
    claimed_at = now(),
    lease_expires_at = now() + make_interval(secs => $3),
    started_at = null,
    next_attempt_at = null,
    provider_status = null,
    updated_at = now()
from picked
where o.id = picked.id
returning o.id::text, o.organization_id::text, coalesce(o.integration_connection_id::text, ''),
    coalesce(o.command_type, ''), o.claim_token::text, o.attempt_count,
    o.id in (select id from expired) as reclaimed, o.created_at`

// deadLetterExpiredSQL moves rows whose lease expired after their last
// attempt, and accepted rows whose follow-up is due with no attempts left, to
// dead_letter, with their one open conflict. $1 MAX_ATTEMPTS, $2
// optional organization, $3 optional id list (the same scope as the claim).
const deadLetterExpiredSQL = `
with expired as (
    update external_integration_outbox o
    set status = 'dead_letter',
        last_error = left(case when o.provider_status is null
                then 'attempts exhausted: the lease of the last attempt expired without a recorded result'
                else 'attempts exhausted: the provider answered ' || o.provider_status || ' but never confirmed completion'
            end || coalesce('; previous error: ' || o.last_error, ''), 1000),
        lease_expires_at = null,
        next_attempt_at = null,
        updated_at = now()
    where o.status = 'processing'
      and ((o.provider_status is null and o.lease_expires_at < now())
        or (o.provider_status is not null and o.next_attempt_at <= now()))
      and o.attempt_count >= $1
      and ($2::uuid is null or o.organization_id = $2)
      and ($3::text[] is null or o.id = any($3::text[]::uuid[]))
    returning o.*
), conflicts as (
    insert into external_integration_conflicts (organization_id, location_id, integration_connection_id,
        conflict_type, severity, local_entity_type, local_entity_id, summary, local_snapshot, outbox_id)
    select e.organization_id, c.location_id, e.integration_connection_id,
        'provider_rejected', 'high', e.local_entity_type, e.local_entity_id,
        'External provider outbound command reached dead letter: attempts exhausted.',
        jsonb_build_object('outboxId', e.id, 'commandType', e.command_type,
            'idempotencyKey', e.idempotency_key, 'lastError', e.last_error),
        e.id
    from expired e
    left join integration_connections c
        on c.id = e.integration_connection_id and c.organization_id = e.organization_id
    on conflict (outbox_id) where status = 'open' and outbox_id is not null do nothing
)
select count(*) from expired`

// releaseSQL puts claimed rows whose message could not be sent back at once:
// due now, the attempt not consumed, the claim dropped.
const releaseSQL = `
update external_integration_outbox o
set status = 'queued',
    attempt_count = greatest(o.attempt_count - 1, 0),
    claim_token = null,
    claimed_at = null,
    lease_expires_at = null,
    next_attempt_at = null,
    updated_at = now()
from unnest($1::text[]::uuid[], $2::text[]::uuid[], $3::text[]::uuid[], $4::text[]::uuid[]) as r(id, organization_id, claim_token, connection_id)
where o.id = r.id and o.organization_id = r.organization_id
  and o.integration_connection_id is not distinct from r.connection_id
  and o.claim_token = r.claim_token and o.status = 'processing' and o.started_at is null`

// unsupportedSQL ends claimed rows nobody can deliver ($5 says why).
const unsupportedSQL = `
update external_integration_outbox o
set status = 'unsupported',
    completed_at = now(),
    last_error = $5,
    lease_expires_at = null,
    updated_at = now()
from unnest($1::text[]::uuid[], $2::text[]::uuid[], $3::text[]::uuid[], $4::text[]::uuid[]) as r(id, organization_id, claim_token, connection_id)
where o.id = r.id and o.organization_id = r.organization_id
  and o.integration_connection_id is not distinct from r.connection_id
  and o.claim_token = r.claim_token and o.status = 'processing'`

// noConnectionSQL ends claimed rows that have no integration connection:
// nothing can deliver them and no attempt would change that, so they go to
// dead_letter at once with the attempt given back and their one open
// configuration_invalid conflict. Fenced like releaseSQL.
const noConnectionSQL = `
with ended as (
    update external_integration_outbox o
    set status = 'dead_letter',
        attempt_count = greatest(o.attempt_count - 1, 0),
        last_error = 'integration_connection_id: missing: the command names no integration connection',
        lease_expires_at = null,
        next_attempt_at = null,
        updated_at = now()
    from unnest($1::text[]::uuid[], $2::text[]::uuid[], $3::text[]::uuid[]) as r(id, organization_id, claim_token)
    where o.id = r.id and o.organization_id = r.organization_id
      and o.integration_connection_id is null
      and o.claim_token = r.claim_token and o.status = 'processing' and o.started_at is null
    returning o.*
), conflicts as (
    insert into external_integration_conflicts (organization_id, location_id, integration_connection_id,
        conflict_type, severity, local_entity_type, local_entity_id, summary, local_snapshot, outbox_id)
    select e.organization_id, null::uuid, null::uuid,
        'configuration_invalid', 'high', e.local_entity_type, e.local_entity_id,
        'External provider outbound command reached dead letter (configuration_invalid): ' || e.last_error,
        jsonb_build_object('outboxId', e.id, 'commandType', e.command_type,
            'idempotencyKey', e.idempotency_key, 'lastError', e.last_error),
        e.id
    from ended e
    on conflict (outbox_id) where status = 'open' and outbox_id is not null do nothing
)
select count(*) from ended`

// startSQL consumes claims: one atomic update marks each job started for its
// token (a stale token, an already started claim or a lease that has expired
// matches nothing: the next dispatch may already be reclaiming that row) and
// extends its lease to $5, the end of the push, so that no reclaim takes a
// job that is mid-call (a null $5 keeps the lease as it is). The
// same statement loads the job's connection and, for purchase-order pushes,
// the order with its lines — organization scoped, and location scoped when
// the connection has a location. The order's columns come out as they are
// named (Start turns them into camelCase); its lines in the seed's shape.
const startSQL = `
with req as (
    select * from unnest($1::text[]::uuid[], $2::text[]::uuid[], $3::text[]::uuid[], $4::text[]::uuid[], $5::timestamptz[])
        as r(id, organization_id, claim_token, connection_id, lease_until)
), started as (
    update external_integration_outbox o
    set started_at = now(), updated_at = now(),
        lease_expires_at = greatest(o.lease_expires_at, req.lease_until)
    from req
    where o.id = req.id and o.organization_id = req.organization_id
      and o.integration_connection_id is not distinct from req.connection_id
      and o.claim_token = req.claim_token
      and o.status = 'processing' and o.started_at is null
      and o.lease_expires_at > now()
    returning o.id, o.organization_id, o.integration_connection_id, o.command_type,
        o.local_entity_type, o.local_entity_id, o.payload_json, o.idempotency_key,
        o.attempt_count, o.claim_token
)
select s.id::text, s.organization_id::text, coalesce(s.integration_connection_id::text, ''),
    coalesce(s.command_type, ''), coalesce(s.local_entity_type, ''), coalesce(s.local_entity_id::text, ''),
    coalesce(s.payload_json, '{}'::jsonb), coalesce(s.idempotency_key, s.id::text),
    s.attempt_count, s.claim_token::text,
    c.id is not null, coalesce(c.location_id::text, ''), coalesce(c.provider, ''),
    coalesce(c.credential_reference, ''), coalesce(c.config_json, '{}'::jsonb),
    po.doc, po.items
from started s
left join integration_connections c
    on c.id = s.integration_connection_id and c.organization_id = s.organization_id
left join lateral (
    select to_jsonb(p) as doc, coalesce((
        select jsonb_agg(jsonb_build_object(
            'id', l.id, 'stockItemId', l.stock_item_id, 'quantity', l.ordered_quantity,
            'unitCode', l.purchase_unit_code, 'normalizedUnitCode', l.normalized_unit_code,
            'unitsPerPurchaseUnit', l.units_per_purchase_unit_snapshot,
            'unitPriceMinor', l.unit_price_minor_snapshot) order by l.created_at, l.id)
        from purchase_order_lines l where l.purchase_order_id = p.id), '[]'::jsonb) as items
    from purchase_orders p
    where s.command_type = 'push_purchase_order'
      and p.id = s.local_entity_id and p.organization_id = s.organization_id
      and (c.location_id is null or p.location_id = c.location_id)
) po on true`

// recordSQL records the results of started jobs, fenced by their claim token,
// opens one conflict per row that reached dead_letter, and appends one
// attempt-history row per recorded result (a stale token records neither):
// the history costs no statement of its own.
const recordSQL = `
with res as (
    select * from unnest($1::text[]::uuid[], $2::text[]::uuid[], $3::text[]::uuid[], $4::text[], $5::text[], $6::text[],
        $7::text[], $8::float8[], $9::text[], $10::text[], $11::text[]::uuid[], $12::text[]::uuid[],
        $13::timestamptz[], $14::timestamptz[], $15::bool[], $16::int[])
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
)
select id::text from updated`
