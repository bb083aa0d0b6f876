-- What this project adds to the host application's tables, and its own tables.
-- The host owns external_integration_outbox, integration_connections,
-- purchase_orders, purchase_order_lines and external_integration_conflicts
-- (migrate.Up creates a stand-in of them from standin/host_schema.sql where
-- they are missing); the schema comes from the connection's search_path.
--
-- Columns, constraints and indexes on host tables are not in this file: they
-- are declared per migration in internal/migrate/hostobjects.go and added by
-- internal/migrate's Installer before this file runs, without blocking the
-- host's writes (indexes built CONCURRENTLY, constraints NOT VALID then
-- validated, ALTERs under a short lock_timeout). Each is added only if the
-- host does not have it already, and recorded in
-- integration_outbox_owned_objects; the down step drops exactly the recorded
-- objects: never a host table, never a column the host had before.

-- +goose Up
-- This file touches only our own tables and functions; a lock it cannot get
-- within the timeout is another session's: the run fails and can be repeated.
set local lock_timeout = '5s';
create table if not exists integration_outbox_owned_objects (
    id bigint generated always as identity primary key,
    migration bigint not null,
    kind text not null check (kind in ('column', 'constraint', 'index')),
    table_name text not null,
    object_name text not null,
    created_at timestamptz not null default now(),
    unique (kind, table_name, object_name)
);

create table if not exists external_integration_rerun_audit (
    id uuid primary key default gen_random_uuid(),
    organization_id uuid not null,
    requested_by text,
    reason text not null,
    payload jsonb not null,
    affected_ids uuid[] not null default '{}',
    skipped jsonb not null default '[]'::jsonb,
    dispatch_now boolean not null default false,
    created_at timestamptz not null default now()
);
create index if not exists external_integration_rerun_audit_org_idx
    on external_integration_rerun_audit (organization_id, created_at);

-- +goose Down
set local lock_timeout = '5s';
-- The Installer has already dropped what this migration recorded on the host
-- tables. Then our own tables; the host tables stay. The ownership functions
-- are those of installs made before the Installer (migration 5 drops them).
drop table if exists external_integration_rerun_audit;
drop function if exists integration_outbox_drop_owned(bigint);
drop function if exists integration_outbox_own_index(bigint, text, text, text, boolean);
drop function if exists integration_outbox_own_constraint(bigint, text, text, text);
drop function if exists integration_outbox_own_column(bigint, text, text, text);
drop table if exists integration_outbox_owned_objects;
