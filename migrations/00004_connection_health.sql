-- Overload and outages: the indexes the fair, capped claim walks, and the
-- circuit breaker's state per integration connection, shared by every
-- container of the fleet.

-- +goose Up
-- This file touches only our own tables and functions; a lock it cannot get
-- within the timeout is another session's: the run fails and can be repeated.
set local lock_timeout = '5s';

-- The claim's walk, orphan and per-connection leased indexes on the host's
-- outbox are declared for this migration in internal/migrate/hostobjects.go
-- (built CONCURRENTLY by the Installer before this file runs).

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
set local lock_timeout = '5s';
drop table if exists integration_outbox_connection_health;
