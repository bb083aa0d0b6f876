package overload

// legacyClaimSQL is our claim as it was before the in-flight caps, verbatim:
// one global created_at order, no in-flight caps, no circuit breaker. The scenarios run
// it as "today's settings". $1 limit, $2 MAX_ATTEMPTS, $3 lease seconds,
// $4 optional organization, $5 optional id list.
const legacyClaimSQL = `
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

// tenantSQL creates one organization with one connection of the "sim"
// provider and one purchase order; it returns the three ids.
const tenantSQL = `
with c as (
    insert into integration_connections (organization_id, provider, config_json)
    values (gen_random_uuid(), 'sim', '{}') returning id, organization_id
), po as (
    insert into purchase_orders (organization_id, order_number, status, currency_code)
    select organization_id, 'PO-1', 'approved', 'EUR' from c returning id
)
select c.organization_id::text, c.id::text, po.id::text from c, po`

// rowsSQL queues $4 push_purchase_order rows of one tenant, created a
// microsecond apart from now, each for a purchase order of its own (a copy
// of the tenant's $3): per-entity order holds none back. $1 organization,
// $2 connection, $5 key prefix.
const rowsSQL = `
with orders as (
    insert into purchase_orders (organization_id, order_number, status, currency_code)
    select p.organization_id, p.order_number || '-' || g, p.status, p.currency_code
    from purchase_orders p cross join generate_series(1, $4::int) g
    where p.id = $3::uuid and p.organization_id = $1::uuid
    returning id
), numbered as (
    select id, row_number() over () as g from orders
)
insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
    local_entity_type, local_entity_id, payload_json, idempotency_key, status, created_at)
select $1::uuid, $2::uuid, 'sim', 'push_purchase_order', 'purchase_order', n.id,
    '{"externalSupplierId": "SUP-1"}', $5 || n.g, 'queued', now() + n.g * interval '1 microsecond'
from numbered n`

// outcomeSQL sums up the rows of a scenario: per idempotency-key prefix
// (tenant), rows, attempts, and rows by final status.
const outcomeSQL = `
select split_part(idempotency_key, ':', 1), count(*)::int, coalesce(sum(attempt_count), 0)::int,
    (count(*) filter (where status = 'completed'))::int,
    (count(*) filter (where status = 'dead_letter'))::int
from external_integration_outbox
group by 1`
