-- integration_outbox_enqueue, the producers' way into the outbox
-- (docs/producers.md), and integration_outbox_enqueue_existing and
-- integration_outbox_key_id, which it calls: their one definition (create or
-- replace).
--
-- Migrations 2, 6, 9, 12, 22, 25 and 26 each apply this file
-- (migrations/00002_enqueue.go and the six after it): a fresh install gets
-- it at migration 2; an install at an older version, whose function is an
-- earlier body, gets it at the first of 6, 9, 12 and 22 it has not run yet.
-- Their down steps leave the functions as they are; only migration 2's drops
-- them. So this file must work at every schema version from 2 on, in the
-- middle of a live upgrade too, while the host calls the function: it may use
-- the host's tables and what migration 2 adds (idempotency_enforced and the
-- two key indexes, declared in internal/migrate/hostobjects.go), never an
-- object of a later migration (plpgsql checks names only when a call runs). A
-- change to it is a new migration that applies this file again, as 22, 25
-- and 26 do, which brings installed databases to it. The test that calls it at every
-- version: TestEnqueueWorksAtEveryVersionFromMigration2 (internal/migrate).
--
-- What each of those migrations changed: 2 made the function; 6 gave it the
-- worker's key rule; 9 made a new key cost one probe; 12 made the commands
-- enqueued in one transaction read created_at in the order of the calls; 22
-- made a call cheaper for the host's server (the names below, one pattern
-- for the key, the connection and the key probed in one statement); 25 made
-- the row's id the key's (integration_outbox_key_id), so the outbox's primary
-- key keeps the key unique and the row enters no key index; 26 made a call
-- one statement (the insert reads the connection and probes the key indexes
-- left to honour) and decided those probes again.
--
-- The names in double braces are filled in when a migration applies the
-- file (migrations/enqueue.go): {{.Outbox}} and {{.Connections}} are the
-- host's two tables, schema-qualified as the migration's search_path finds
-- them, and {{.Schema}} is the schema the functions are created in (the
-- first of that search_path). Before 22 the functions carried
-- "set search_path from current" instead, and every call saved, set and
-- restored the caller's search_path.
--
-- Idempotency on (organization_id, idempotency_key) without touching what the
-- host table already holds: existing rows may repeat a key, so nothing unique
-- over every row's key could be built. A row the function inserts has as its
-- id integration_outbox_key_id(organization_id, idempotency_key), a digest of
-- the two, and one of two things keeps it unique, chosen by the migration
-- that applies the file (EnqueueNames.KeyIndex, migrations/enqueue.go):
--
-- - the key index (KeyIndex; migrations 2 to 22, and 25 and 26 where the
--   outbox's id has no unique index): the row carries idempotency_enforced = true, and
--   only those rows are in a partial unique index on the key (empty when it
--   is built). Adding the column is a catalog change only (a constant default
--   needs no table rewrite since PostgreSQL 11): existing rows read false and
--   stay as they are.
-- - the id (migrations 25 and 26, where the outbox's id is unique, as a
--   primary key is): the row leaves idempotency_enforced to its default (NULL from
--   migration 10; false before, after a down step) and enters no key index,
--   so neither its insert nor any later update of the row (the claim, the
--   record) writes a key entry. A second call derives the same id and
--   conflicts with the first row on the outbox's own unique index.
--
-- A row of either way conflicts with one of the other on its id, so the two
-- bodies may run side by side; a body from before migration 25 (a random id)
-- may not run beside the second, and migration 25 waits for its calls to end
-- before it applies the second (migrations/00025_enqueue_key_in_the_id.go).
-- Rows with idempotency_enforced = false (the host's rows from before
-- migration 10) and the key index's rows (the function's before migration
-- 25) are still honoured: the function returns the oldest row with the key.

-- The id of the row the function inserts for a key: the first 128 bits of
-- SHA-256 over the organization's 16 bytes and the key's UTF-8, marked as a
-- UUID of version 8 (the nibbles at 13 and 17 set to 8), so it never equals
-- a random (version 4) id. Stable, not immutable, as convert_to is.
create or replace function {{.Schema}}.integration_outbox_key_id(organization_id uuid, idempotency_key text)
returns uuid
language sql
stable
parallel safe
as $fn$
    select overlay(overlay(left(encode(sha256(uuid_send($1) || convert_to($2, 'UTF8')), 'hex'), 32)
        placing '8' from 13) placing '8' from 17)::uuid
$fn$;

-- The oldest row holding the key (created_at, then id): the one the first
-- enqueue returned when the host's table already repeats a key. The row the
-- function inserted under either way is one of the last two branches.
create or replace function {{.Schema}}.integration_outbox_enqueue_existing(organization_id uuid, idempotency_key text)
returns uuid
language sql
stable
as $fn$
    select id from (
        select o.id, o.created_at from {{.Outbox}} o
        where o.organization_id = $1 and o.idempotency_key = $2 and o.idempotency_enforced
        union all
        select o.id, o.created_at from {{.Outbox}} o
        where o.organization_id = $1 and o.idempotency_key = $2 and not o.idempotency_enforced
          and o.idempotency_key is not null
        union all
        select o.id, o.created_at from {{.Outbox}} o
        where o.id = {{.Schema}}.integration_outbox_key_id($1, $2)
          and o.organization_id = $1 and o.idempotency_key = $2
    ) keyed
    order by created_at, id
    limit 1
$fn$;

create or replace function {{.Schema}}.integration_outbox_enqueue(
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
-- Every name is schema-qualified: tables resolve where the migration found
-- them, whatever the caller's search_path.
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
    v_inserted uuid;
    v_created_at timestamptz;
    v_previous text;
begin
    -- Every rule in one expression on the way in (each expression is a
    -- cost on every call); which rule an argument broke is worked out only
    -- for the error.
    if p_organization_id is null or p_connection_id is null or p_command_type is null
        or p_entity_type is null or p_entity_id is null or p_payload is null or p_key is null
        or btrim(p_command_type) = '' or btrim(p_entity_type) = '' or jsonb_typeof(p_payload) <> 'object'
        or p_key = '' or octet_length(p_key) > 255
        or p_key ~ '^[ \t]|[ \t]$|[\x01-\x08\x0a-\x1f\x7f]' then
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
        -- One pattern on the way in (each is a cost on every call); which rule
        -- the key broke is worked out only for the error.
        elsif p_key ~ '^[ \t]|[ \t]$|[\x01-\x08\x0a-\x1f\x7f]' then
            if p_key ~ '[\x01-\x08\x0a-\x1f\x7f]' then
                raise exception 'integration_outbox_enqueue: idempotency_key contains a control character, which cannot be sent as a header value'
                    using errcode = 'invalid_parameter_value', column = 'idempotency_key';
            end if;
            raise exception 'integration_outbox_enqueue: idempotency_key has leading or trailing white space, which cannot be sent as a header value'
                using errcode = 'invalid_parameter_value', column = 'idempotency_key';
        end if;
    end if;

    -- Commands enqueued in one transaction keep the order of the calls:
    -- each takes the time of the call, and never one at or before the
    -- previous call's in this transaction (now() is the same for every call
    -- of a transaction, and a random id would break the tie).
    v_created_at := greatest(clock_timestamp(),
        nullif(current_setting('integration_outbox.enqueued_at', true), '')::timestamptz + interval '1 microsecond');

    -- One statement a call: the insert reads the connection, organization
    -- scoped, and inserts nothing where it is not the organization's{{if or .KeyIndex .HostKeys .KeyProbe}}, or
    -- where a row the function's id does not hold has the key: the host's
    -- own keyed rows from before migration 10{{if and (not .KeyIndex) .KeyProbe}}, and the function's rows from
    -- before migration 25, which gave them random ids{{end}} (migration 25 or 26
    -- leaves out a probe of an index that holds none){{end}}. {{if .KeyIndex}}The unique
    -- indexes answer{{else}}The id's unique index answers{{end}} for the keys this function inserted.
    -- Only a call that inserts nothing (a repeated key, a key the host's rows
    -- carry, another organization's connection) costs a look-up after it.
    --
    -- A concurrent call with the same key waits here on {{if .KeyIndex}}a{{else}}the id's{{end}} unique index
    -- until the first transaction ends: after a commit it inserts nothing
    -- (and, under REPEATABLE READ or SERIALIZABLE, whose snapshot cannot see
    -- that row, PostgreSQL raises serialization_failure 40001: retry the
    -- transaction); after a rollback it inserts.
    insert into {{.Outbox}} (id, organization_id, integration_connection_id, provider, command_type,
        local_entity_type, local_entity_id, payload_json, idempotency_key,{{if .KeyIndex}} idempotency_enforced,{{end}}
        status, attempt_count, next_attempt_at, created_at)
    select {{.Schema}}.integration_outbox_key_id(p_organization_id, p_key), p_organization_id, p_connection_id, c.provider, p_command_type,
        p_entity_type, p_entity_id, p_payload, p_key,{{if .KeyIndex}} true,{{end}}
        'queued', 0, now(), v_created_at
    from {{.Connections}} c
    where c.id = p_connection_id and c.organization_id = p_organization_id{{if or .KeyIndex .HostKeys}}
      and not exists (
            select from {{.Outbox}} o
            where o.organization_id = p_organization_id and o.idempotency_key = p_key
              and not o.idempotency_enforced and o.idempotency_key is not null){{end}}{{if and (not .KeyIndex) .KeyProbe}}
      and not exists (
            select from {{.Outbox}} o
            where o.organization_id = p_organization_id and o.idempotency_key = p_key
              and o.idempotency_enforced){{end}}
    on conflict {{if not .KeyIndex}}(id) {{end}}do nothing
    returning id into v_inserted;
    if v_inserted is not null then
        -- An assignment, not a PERFORM: a plain expression skips the executor.
        v_previous := set_config('integration_outbox.enqueued_at', v_created_at::text, true);
    else
        -- A missing connection and another organization's read the same, so
        -- the error tells nothing about other tenants.
        perform from {{.Connections}} c
        where c.id = p_connection_id and c.organization_id = p_organization_id;
        if not found then
            raise exception 'integration_outbox_enqueue: integration_connection_id % is not a connection of organization %',
                    p_connection_id, p_organization_id
                using errcode = 'foreign_key_violation', column = 'integration_connection_id';
        end if;
        -- A new statement, so a new snapshot under READ COMMITTED: it sees the
        -- row the other transaction committed.
        v_inserted := {{.Schema}}.integration_outbox_enqueue_existing(p_organization_id, p_key);
        if v_inserted is null then
            -- The id is another key's (the host changed that row's key or
            -- organization), or the row went between the two statements.
            raise exception 'integration_outbox_enqueue: the id % of idempotency_key % is held by a row of another key, or its row was deleted meanwhile',
                    {{.Schema}}.integration_outbox_key_id(p_organization_id, p_key), p_key
                using errcode = 'unique_violation', column = 'idempotency_key';
        end if;
    end if;
    return v_inserted;
end
$fn$;
