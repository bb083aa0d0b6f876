-- What this project adds to the host application's tables, and its own tables.
-- The host owns external_integration_outbox, integration_connections,
-- purchase_orders, purchase_order_lines and external_integration_conflicts
-- (migrate.Up creates a stand-in of them from standin/host_schema.sql where
-- they are missing); the schema comes from the connection's search_path.
--
-- Columns, constraints and indexes on host tables go through
-- integration_outbox_own_column/_constraint/_index: each adds the object only
-- if the host does not have it already and records in
-- integration_outbox_owned_objects that this migration created it. A down step
-- calls integration_outbox_drop_owned(<its version>), which drops exactly the
-- recorded objects: never a host table, never a column the host had before.

-- +goose Up
create table if not exists integration_outbox_owned_objects (
    id bigint generated always as identity primary key,
    migration bigint not null,
    kind text not null check (kind in ('column', 'constraint', 'index')),
    table_name text not null,
    object_name text not null,
    created_at timestamptz not null default now(),
    unique (kind, table_name, object_name)
);

-- +goose StatementBegin
create or replace function integration_outbox_own_column(
    owner_migration bigint, target_table text, column_name text, definition text
) returns boolean language plpgsql as $$
begin
    if exists (
        select 1 from pg_attribute
        where attrelid = to_regclass(target_table) and attname = column_name and not attisdropped
    ) then
        return false;
    end if;
    execute format('alter table %I add column %I %s', target_table, column_name, definition);
    insert into integration_outbox_owned_objects (migration, kind, table_name, object_name)
        values (owner_migration, 'column', target_table, column_name);
    return true;
end
$$;
-- +goose StatementEnd

-- +goose StatementBegin
create or replace function integration_outbox_own_constraint(
    owner_migration bigint, target_table text, constraint_name text, definition text
) returns boolean language plpgsql as $$
begin
    if exists (
        select 1 from pg_constraint
        where conrelid = to_regclass(target_table) and conname = constraint_name
    ) then
        return false;
    end if;
    execute format('alter table %I add constraint %I %s', target_table, constraint_name, definition);
    insert into integration_outbox_owned_objects (migration, kind, table_name, object_name)
        values (owner_migration, 'constraint', target_table, constraint_name);
    return true;
end
$$;
-- +goose StatementEnd

-- definition is everything after "on <table>": the column list and any where clause.
-- +goose StatementBegin
create or replace function integration_outbox_own_index(
    owner_migration bigint, target_table text, index_name text, definition text, is_unique boolean default false
) returns boolean language plpgsql as $$
begin
    if exists (
        select 1 from pg_index i join pg_class c on c.oid = i.indexrelid
        where i.indrelid = to_regclass(target_table) and c.relname = index_name
    ) then
        return false;
    end if;
    execute format('create %s index %I on %I %s',
        case when is_unique then 'unique' else '' end, index_name, target_table, definition);
    insert into integration_outbox_owned_objects (migration, kind, table_name, object_name)
        values (owner_migration, 'index', target_table, index_name);
    return true;
end
$$;
-- +goose StatementEnd

-- Drops, newest first, what the given migration recorded, and only that.
-- +goose StatementBegin
create or replace function integration_outbox_drop_owned(owner_migration bigint)
returns integer language plpgsql as $$
declare
    owned record;
    index_oid regclass;
    dropped integer := 0;
begin
    for owned in
        select id, kind, table_name, object_name from integration_outbox_owned_objects
        where migration = owner_migration order by id desc
    loop
        if to_regclass(owned.table_name) is not null then
            case owned.kind
            when 'index' then
                select i.indexrelid::regclass into index_oid
                from pg_index i join pg_class c on c.oid = i.indexrelid
                where i.indrelid = to_regclass(owned.table_name) and c.relname = owned.object_name;
                if index_oid is not null then
                    execute format('drop index %s', index_oid);
                end if;
            when 'constraint' then
                execute format('alter table %I drop constraint if exists %I', owned.table_name, owned.object_name);
            when 'column' then
                execute format('alter table %I drop column if exists %I', owned.table_name, owned.object_name);
            end case;
        end if;
        delete from integration_outbox_owned_objects where id = owned.id;
        dropped := dropped + 1;
    end loop;
    return dropped;
end
$$;
-- +goose StatementEnd

-- Lease and fencing: a claim sets a fresh claim_token and a lease; starting the
-- job consumes the claim (started_at); only the current token records a result.
select integration_outbox_own_column(1, 'external_integration_outbox', 'claim_token', 'uuid');
select integration_outbox_own_column(1, 'external_integration_outbox', 'claimed_at', 'timestamptz');
select integration_outbox_own_column(1, 'external_integration_outbox', 'lease_expires_at', 'timestamptz');
select integration_outbox_own_column(1, 'external_integration_outbox', 'started_at', 'timestamptz');
select integration_outbox_own_column(1, 'external_integration_outbox', 'updated_at', 'timestamptz not null default now()');

select integration_outbox_own_constraint(1, 'external_integration_outbox', 'external_integration_outbox_status_check',
    $sql$check (status in ('queued', 'processing', 'completed', 'failed', 'uncertain', 'unsupported', 'dead_letter'))$sql$);

-- Claim cost stays flat as terminal rows pile up: the claim scans only these
-- partial indexes, whose size is the number of claimable / in-flight rows.
select integration_outbox_own_index(1, 'external_integration_outbox', 'external_integration_outbox_claimable_idx',
    $sql$(created_at) where status in ('queued', 'failed')$sql$);
select integration_outbox_own_index(1, 'external_integration_outbox', 'external_integration_outbox_leased_idx',
    $sql$(lease_expires_at) where status = 'processing' and provider_status is null$sql$);
select integration_outbox_own_index(1, 'external_integration_outbox', 'external_integration_outbox_follow_up_idx',
    $sql$(next_attempt_at) where status = 'processing' and provider_status is not null$sql$);
-- Operators' views and reruns by tenant. Completed rows, the bulk of the
-- table, are left out: the index stays the size of the live rows and
-- completing a row adds no entry to it.
select integration_outbox_own_index(1, 'external_integration_outbox', 'external_integration_outbox_org_status_idx',
    $sql$(organization_id, status, created_at) where status <> 'completed'$sql$);

select integration_outbox_own_column(1, 'external_integration_conflicts', 'outbox_id', 'uuid');
select integration_outbox_own_column(1, 'external_integration_conflicts', 'resolved_at', 'timestamptz');
select integration_outbox_own_column(1, 'external_integration_conflicts', 'resolution_reason', 'text');
-- One open conflict per outbox row.
select integration_outbox_own_index(1, 'external_integration_conflicts', 'external_integration_conflicts_open_outbox_idx',
    $sql$(outbox_id) where status = 'open' and outbox_id is not null$sql$, true);
select integration_outbox_own_index(1, 'external_integration_conflicts', 'external_integration_conflicts_org_idx',
    $sql$(organization_id, status, created_at)$sql$);

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
-- Only what the up step created: the recorded columns, constraint and indexes
-- on host tables, then our own tables and functions. The host tables stay.
-- (A schema migrated before the bookkeeping existed has no records: its
-- columns stay too.)
-- +goose StatementBegin
do $$
begin
    if to_regprocedure('integration_outbox_drop_owned(bigint)') is not null then
        perform integration_outbox_drop_owned(1);
    end if;
end
$$;
-- +goose StatementEnd
drop table if exists external_integration_rerun_audit;
drop function if exists integration_outbox_drop_owned(bigint);
drop function if exists integration_outbox_own_index(bigint, text, text, text, boolean);
drop function if exists integration_outbox_own_constraint(bigint, text, text, text);
drop function if exists integration_outbox_own_column(bigint, text, text, text);
drop table if exists integration_outbox_owned_objects;
