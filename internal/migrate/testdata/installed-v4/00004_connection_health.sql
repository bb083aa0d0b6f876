-- Overload and outages: the indexes the fair, capped claim walks, and the
-- circuit breaker's state per integration connection, shared by every
-- container of the fleet.

-- +goose Up

-- The claim's walk over (organization, connection) pairs with claimable rows:
-- a skip scan that takes O(batch) probes, oldest first within each pair. The
-- included columns let it tell a due row from a waiting one without the heap.
select integration_outbox_own_index(4, 'external_integration_outbox', 'external_integration_outbox_claim_walk_idx',
    $def$(organization_id, integration_connection_id, created_at) include (next_attempt_at, attempt_count) where status in ('queued', 'failed') and integration_connection_id is not null$def$);
-- Claimable rows without a connection (nothing to walk; the claim takes them
-- oldest first so that they end instead of waiting).
select integration_outbox_own_index(4, 'external_integration_outbox', 'external_integration_outbox_claim_orphan_idx',
    $def$(created_at) where status in ('queued', 'failed') and integration_connection_id is null$def$);
-- Leased rows per connection: the claim counts them against the connection's
-- in-flight limit.
select integration_outbox_own_index(4, 'external_integration_outbox', 'external_integration_outbox_connection_leased_idx',
    $def$(integration_connection_id, lease_expires_at) where status = 'processing' and provider_status is null$def$);

-- One row per connection that has failed: consecutive retryable failures and
-- the circuit. open_until null: closed. open_until in the future: open, its
-- rows are not claimed. open_until past: half-open, one probe row at a time.
-- opened_count counts the openings since the circuit last closed (the
-- cooldown doubles with each, capped at an hour).
create table if not exists integration_outbox_connection_health (
    connection_id uuid primary key,
    organization_id uuid not null,
    consecutive_failures integer not null default 0,
    opened_count integer not null default 0,
    open_until timestamptz,
    opened_at timestamptz,
    updated_at timestamptz not null default now()
);
create index if not exists integration_outbox_connection_health_org_idx
    on integration_outbox_connection_health (organization_id);

-- +goose Down
drop table if exists integration_outbox_connection_health;
select integration_outbox_drop_owned(4);
