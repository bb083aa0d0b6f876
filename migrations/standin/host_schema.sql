-- Stand-in for the host application's schema: the five tables the host owns,
-- with the columns the old worker reads and writes, so that an empty database
-- (the demo, the tests, the benchmarks) can run the outbox. migrate.Up applies
-- it before the numbered migrations; it creates only the tables that the
-- search_path finds nowhere (to_regclass looks in every schema of it, as the
-- host's own queries do, where "create table if not exists" looks only in the
-- first), so a host that already created them, in any schema of the
-- search_path, keeps them exactly as they are and never gets an empty copy in
-- front of them. Nothing ever reverts this file: these tables and their rows
-- belong to the host, and no down step drops them.

do $$
begin
    if to_regclass('integration_connections') is null then
        create table integration_connections (
            id uuid primary key default gen_random_uuid(),
            organization_id uuid not null,
            location_id uuid,
            provider text not null,
            credential_reference text,
            config_json jsonb not null default '{}'::jsonb,
            created_at timestamptz not null default now(),
            updated_at timestamptz not null default now()
        );
    end if;

    if to_regclass('purchase_orders') is null then
        create table purchase_orders (
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
    end if;

    -- The index comes with the table: a host that has its own
    -- purchase_order_lines gets nothing added to it.
    if to_regclass('purchase_order_lines') is null then
        create table purchase_order_lines (
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
        create index purchase_order_lines_purchase_order_id_idx
            on purchase_order_lines (purchase_order_id, created_at);
    end if;

    if to_regclass('external_integration_outbox') is null then
        create table external_integration_outbox (
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
    end if;

    if to_regclass('external_integration_conflicts') is null then
        create table external_integration_conflicts (
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
    end if;
end
$$;
