-- integration_outbox_enqueue, cheaper for the common case of a new key: it
-- no longer looks the key up among the rows it inserted before inserting (a
-- SQL function, planned on every call, probing two indexes); it probes the
-- host's own keyed rows, then inserts, and the unique index's on conflict
-- tells a repeated key. What it returns is unchanged: the oldest row holding
-- the key. The down step puts migration 6's body back.

-- +goose Up
-- This file touches only our own functions; a lock it cannot get within the
-- timeout is another session's: the run fails and can be repeated.
set local lock_timeout = '5s';
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
    -- The worker's rule for a key it can send as an HTTP header value
    -- (Idempotency-Key, webhook-id): internal/push checkIdempotencyKey.
    elsif p_key = '' then
        raise exception 'integration_outbox_enqueue: idempotency_key must not be empty'
            using errcode = 'invalid_parameter_value', column = 'idempotency_key';
    elsif octet_length(p_key) > 255 then
        raise exception 'integration_outbox_enqueue: idempotency_key is % bytes, at most 255 can be sent',
                octet_length(p_key)
            using errcode = 'invalid_parameter_value', column = 'idempotency_key';
    elsif p_key ~ '^[ \t]' or p_key ~ '[ \t]$' then
        raise exception 'integration_outbox_enqueue: idempotency_key has leading or trailing white space, which cannot be sent as a header value'
            using errcode = 'invalid_parameter_value', column = 'idempotency_key';
    elsif p_key ~ '[\x01-\x08\x0a-\x1f\x7f]' then
        raise exception 'integration_outbox_enqueue: idempotency_key contains a control character, which cannot be sent as a header value'
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

    -- Most keys are new. Probe only the host's own keyed rows first (their
    -- index, with a plan cached in the function), then insert: the unique
    -- index answers for the keys this function inserted before. Only a key
    -- the host's rows carry, or a repeated one, costs the full look-up.
    perform 1 from external_integration_outbox o
    where o.organization_id = p_organization_id and o.idempotency_key = p_key
      and not o.idempotency_enforced and o.idempotency_key is not null;
    if found then
        return integration_outbox_enqueue_existing(p_organization_id, p_key);
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
set local lock_timeout = '5s';
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
    -- The worker's rule for a key it can send as an HTTP header value
    -- (Idempotency-Key, webhook-id): internal/push checkIdempotencyKey.
    elsif p_key = '' then
        raise exception 'integration_outbox_enqueue: idempotency_key must not be empty'
            using errcode = 'invalid_parameter_value', column = 'idempotency_key';
    elsif octet_length(p_key) > 255 then
        raise exception 'integration_outbox_enqueue: idempotency_key is % bytes, at most 255 can be sent',
                octet_length(p_key)
            using errcode = 'invalid_parameter_value', column = 'idempotency_key';
    elsif p_key ~ '^[ \t]' or p_key ~ '[ \t]$' then
        raise exception 'integration_outbox_enqueue: idempotency_key has leading or trailing white space, which cannot be sent as a header value'
            using errcode = 'invalid_parameter_value', column = 'idempotency_key';
    elsif p_key ~ '[\x01-\x08\x0a-\x1f\x7f]' then
        raise exception 'integration_outbox_enqueue: idempotency_key contains a control character, which cannot be sent as a header value'
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
