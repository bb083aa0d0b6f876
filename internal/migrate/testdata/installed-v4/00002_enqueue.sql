-- The producer's entry point: the host enqueues a command with
-- integration_outbox_enqueue(...) inside its own business transaction (see
-- docs/producers.md).
--
-- Idempotency on (organization_id, idempotency_key) without touching what the
-- host table already holds: existing rows may repeat a key, so a unique index
-- over every row could fail to build. Instead the rows this function inserts
-- carry idempotency_enforced = true and only those are unique (a partial unique
-- index, empty when it is built). Adding the column is a catalog change only
-- (a constant default needs no table rewrite since PostgreSQL 11): existing rows
-- read false and stay as they are, and the host's own inserts are unaffected.
-- Rows with idempotency_enforced = false (the host's older or direct inserts)
-- are still honoured: the function returns the oldest row with the key.

-- +goose Up
-- Our column and indexes on the host's table go through the ownership
-- functions of 00001: added only where the host lacks them, recorded, and
-- dropped by this migration's down step only if this up step added them.
select integration_outbox_own_column(2, 'external_integration_outbox', 'idempotency_enforced',
    'boolean not null default false');

-- Together the two indexes hold one entry per row with a key: the unique one
-- for the function's rows, the plain one for every other row.
select integration_outbox_own_index(2, 'external_integration_outbox', 'external_integration_outbox_enqueue_key_idx',
    '(organization_id, idempotency_key) where idempotency_enforced', true);
select integration_outbox_own_index(2, 'external_integration_outbox', 'external_integration_outbox_legacy_key_idx',
    '(organization_id, idempotency_key, created_at) where not idempotency_enforced and idempotency_key is not null');

-- +goose StatementBegin
-- The oldest row holding the key (created_at, then id): the one the first
-- enqueue returned when the host's table already repeats a key.
create or replace function integration_outbox_enqueue_existing(organization_id uuid, idempotency_key text)
returns uuid
language sql
stable
set search_path from current
as $fn$
    select id from (
        select o.id, o.created_at from external_integration_outbox o
        where o.organization_id = $1 and o.idempotency_key = $2 and o.idempotency_enforced
        union all
        select o.id, o.created_at from external_integration_outbox o
        where o.organization_id = $1 and o.idempotency_key = $2 and not o.idempotency_enforced
          and o.idempotency_key is not null
    ) keyed
    order by created_at, id
    limit 1
$fn$;
-- +goose StatementEnd

-- +goose StatementBegin
create or replace function integration_outbox_enqueue(
    organization_id uuid,
    integration_connection_id uuid,
    command_type text,
    local_entity_type text,
    local_entity_id uuid,
    payload_json jsonb,
    idempotency_key text
) returns uuid
language plpgsql
volatile
-- Tables resolve in the schema the migrations ran in, whatever the caller's
-- search_path.
set search_path from current
as $fn$
#variable_conflict use_column
declare
    -- The parameters keep the outbox's column names (so callers can use named
    -- notation); inside, unqualified names are columns and these are the values.
    p_organization_id alias for $1;
    p_connection_id alias for $2;
    p_command_type alias for $3;
    p_entity_type alias for $4;
    p_entity_id alias for $5;
    p_payload alias for $6;
    p_key alias for $7;
    v_provider text;
    v_id uuid;
begin
    if p_organization_id is null then
        raise exception 'integration_outbox_enqueue: organization_id must not be null'
            using errcode = 'null_value_not_allowed', column = 'organization_id';
    elsif p_connection_id is null then
        raise exception 'integration_outbox_enqueue: integration_connection_id must not be null'
            using errcode = 'null_value_not_allowed', column = 'integration_connection_id';
    elsif p_command_type is null then
        raise exception 'integration_outbox_enqueue: command_type must not be null'
            using errcode = 'null_value_not_allowed', column = 'command_type';
    elsif p_entity_type is null then
        raise exception 'integration_outbox_enqueue: local_entity_type must not be null'
            using errcode = 'null_value_not_allowed', column = 'local_entity_type';
    elsif p_entity_id is null then
        raise exception 'integration_outbox_enqueue: local_entity_id must not be null'
            using errcode = 'null_value_not_allowed', column = 'local_entity_id';
    elsif p_payload is null then
        raise exception 'integration_outbox_enqueue: payload_json must not be null'
            using errcode = 'null_value_not_allowed', column = 'payload_json';
    elsif p_key is null then
        raise exception 'integration_outbox_enqueue: idempotency_key must not be null'
            using errcode = 'null_value_not_allowed', column = 'idempotency_key';
    end if;

    if btrim(p_command_type) = '' then
        raise exception 'integration_outbox_enqueue: command_type must not be blank'
            using errcode = 'invalid_parameter_value', column = 'command_type';
    elsif btrim(p_entity_type) = '' then
        raise exception 'integration_outbox_enqueue: local_entity_type must not be blank'
            using errcode = 'invalid_parameter_value', column = 'local_entity_type';
    elsif jsonb_typeof(p_payload) <> 'object' then
        raise exception 'integration_outbox_enqueue: payload_json must be a JSON object, got a JSON %',
                jsonb_typeof(p_payload)
            using errcode = 'invalid_parameter_value', column = 'payload_json';
    elsif btrim(p_key) = '' then
        raise exception 'integration_outbox_enqueue: idempotency_key must not be blank'
            using errcode = 'invalid_parameter_value', column = 'idempotency_key';
    elsif length(p_key) > 255 then
        raise exception 'integration_outbox_enqueue: idempotency_key must be at most 255 characters, got %',
                length(p_key)
            using errcode = 'invalid_parameter_value', column = 'idempotency_key';
    elsif p_key ~ '[[:cntrl:]]' then
        -- The key travels as an HTTP header (Idempotency-Key, webhook-id).
        raise exception 'integration_outbox_enqueue: idempotency_key must not contain control characters'
            using errcode = 'invalid_parameter_value', column = 'idempotency_key';
    end if;

    -- A missing connection and another organization's read the same, so the
    -- error tells nothing about other tenants.
    select c.provider into v_provider
    from integration_connections c
    where c.id = p_connection_id and c.organization_id = p_organization_id;
    if not found then
        raise exception 'integration_outbox_enqueue: integration_connection_id % is not a connection of organization %',
                p_connection_id, p_organization_id
            using errcode = 'foreign_key_violation', column = 'integration_connection_id';
    end if;

    v_id := integration_outbox_enqueue_existing(p_organization_id, p_key);
    if v_id is not null then
        return v_id;
    end if;

    -- A concurrent call with the same key waits here on the unique index until
    -- the first transaction ends: after a commit it inserts nothing (and, under
    -- REPEATABLE READ or SERIALIZABLE, whose snapshot cannot see that row,
    -- PostgreSQL raises serialization_failure 40001: retry the transaction);
    -- after a rollback it inserts.
    insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
        local_entity_type, local_entity_id, payload_json, idempotency_key, idempotency_enforced,
        status, attempt_count, next_attempt_at)
    values (p_organization_id, p_connection_id, v_provider, p_command_type,
        p_entity_type, p_entity_id, p_payload, p_key, true,
        'queued', 0, now())
    on conflict (organization_id, idempotency_key) where idempotency_enforced do nothing
    returning id into v_id;
    if v_id is null then
        -- A new statement, so a new snapshot under READ COMMITTED: it sees the
        -- row the other transaction committed.
        v_id := integration_outbox_enqueue_existing(p_organization_id, p_key);
    end if;
    return v_id;
end
$fn$;
-- +goose StatementEnd

-- +goose Down
drop function if exists integration_outbox_enqueue(uuid, uuid, text, text, uuid, jsonb, text);
drop function if exists integration_outbox_enqueue_existing(uuid, text);
select integration_outbox_drop_owned(2);
