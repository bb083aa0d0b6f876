-- The outbox schema. The host application owns these tables in production and
-- may have created them already: every statement is idempotent (if not exists)
-- and the schema comes from the connection's search_path.

-- +goose Up
create table if not exists integration_connections (
    id uuid primary key default gen_random_uuid(),
    organization_id uuid not null,
    location_id uuid,
    provider text not null,
    credential_reference text,
    config_json jsonb not null default '{}'::jsonb,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now()
);

create table if not exists purchase_orders (
    id uuid primary key default gen_random_uuid(),
    organization_id uuid not null,
    location_id uuid,
    supplier_id uuid,
    order_number text,
    status text,
    currency_code text,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now()
);

create table if not exists purchase_order_lines (
    id uuid primary key default gen_random_uuid(),
    purchase_order_id uuid not null,
    stock_item_id uuid,
    ordered_quantity numeric,
    purchase_unit_code text,
    normalized_unit_code text,
    units_per_purchase_unit_snapshot numeric,
    unit_price_minor_snapshot bigint,
    created_at timestamptz not null default now()
);
create index if not exists purchase_order_lines_purchase_order_id_idx
    on purchase_order_lines (purchase_order_id, created_at);

create table if not exists external_integration_outbox (
    id uuid primary key default gen_random_uuid(),
    organization_id uuid not null,
    integration_connection_id uuid,
    provider text,
    command_type text,
    local_entity_type text,
    local_entity_id uuid,
    payload_json jsonb not null default '{}'::jsonb,
    idempotency_key text,
    status text not null default 'queued',
    attempt_count integer not null default 0,
    next_attempt_at timestamptz,
    last_error text,
    provider_reference text,
    provider_status text,
    completed_at timestamptz,
    created_at timestamptz not null default now()
);
-- Lease and fencing: a claim sets a fresh claim_token and a lease; starting the
-- job consumes the claim (started_at); only the current token records a result.
alter table external_integration_outbox add column if not exists claim_token uuid;
alter table external_integration_outbox add column if not exists claimed_at timestamptz;
alter table external_integration_outbox add column if not exists lease_expires_at timestamptz;
alter table external_integration_outbox add column if not exists started_at timestamptz;
alter table external_integration_outbox add column if not exists updated_at timestamptz not null default now();

-- +goose StatementBegin
do $$
begin
    if not exists (
        select 1 from pg_constraint
        where conname = 'external_integration_outbox_status_check'
          and conrelid = 'external_integration_outbox'::regclass
    ) then
        alter table external_integration_outbox add constraint external_integration_outbox_status_check
            check (status in ('queued', 'processing', 'completed', 'failed', 'uncertain', 'unsupported', 'dead_letter'));
    end if;
end
$$;
-- +goose StatementEnd

-- Claim cost stays flat as terminal rows pile up: the claim scans only these
-- partial indexes, whose size is the number of claimable / in-flight rows.
create index if not exists external_integration_outbox_claimable_idx
    on external_integration_outbox (created_at)
    where status in ('queued', 'failed');
create index if not exists external_integration_outbox_leased_idx
    on external_integration_outbox (lease_expires_at)
    where status = 'processing' and provider_status is null;
create index if not exists external_integration_outbox_follow_up_idx
    on external_integration_outbox (next_attempt_at)
    where status = 'processing' and provider_status is not null;
-- Operators' views and reruns by tenant. Completed rows, the bulk of the
-- table, are left out: the index stays the size of the live rows and
-- completing a row adds no entry to it.
create index if not exists external_integration_outbox_org_status_idx
    on external_integration_outbox (organization_id, status, created_at)
    where status <> 'completed';

create table if not exists external_integration_conflicts (
    id uuid primary key default gen_random_uuid(),
    organization_id uuid not null,
    location_id uuid,
    integration_connection_id uuid,
    conflict_type text not null,
    severity text not null default 'high',
    local_entity_type text,
    local_entity_id uuid,
    summary text,
    local_snapshot jsonb,
    status text not null default 'open',
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now()
);
alter table external_integration_conflicts add column if not exists outbox_id uuid;
alter table external_integration_conflicts add column if not exists resolved_at timestamptz;
alter table external_integration_conflicts add column if not exists resolution_reason text;
-- One open conflict per outbox row.
create unique index if not exists external_integration_conflicts_open_outbox_idx
    on external_integration_conflicts (outbox_id)
    where status = 'open' and outbox_id is not null;
create index if not exists external_integration_conflicts_org_idx
    on external_integration_conflicts (organization_id, status, created_at);

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
drop table if exists external_integration_rerun_audit;
drop table if exists external_integration_conflicts;
drop table if exists external_integration_outbox;
drop table if exists purchase_order_lines;
drop table if exists purchase_orders;
drop table if exists integration_connections;
