-- Text the worker writes into the host's columns fits them, whatever length
-- the host declared: integration_outbox_fit(value, table, column) is value
-- cut to the column's declared length (varchar(n), char(n)), its last kept
-- character replaced by "…" to mark the cut, or value as it is where the
-- column has no length (text, an enum) or no such column is found. It reads
-- the length from the catalog at each call, so a host that shortens a
-- column after the install gets values that fit the new length, with no
-- install step in between. The statements of ours that write text into a
-- host column (last_error, a conflict's summary and entity type) pass it
-- through this function (internal/hostschema declares which columns those
-- are); but the record, which writes every result, sends its texts already
-- cut to lengths it reads once (outbox/sql/text_lengths.sql): in its update
-- these calls cost about 0.5 ms a command (bench/results.md). Strict: a null
-- stays null without a catalog look-up. A call costs about 11 µs (100,000
-- calls with psql), so a recorded result pays it for its reference, its
-- provider status or its error: the length is read at each call so that a
-- column the host shortens later needs no step of ours.

-- +goose Up
-- A lock it cannot get within the timeout is another session's: the run
-- fails and can be repeated.
set local lock_timeout = '5s';

create or replace function integration_outbox_fit(value text, tbl regclass, col name)
returns text
language sql stable strict parallel safe
as $fn$
    select coalesce((
        select case when a.atttypmod > 4 and length(value) > a.atttypmod - 4
            then left(value, a.atttypmod - 5) || '…'
            else value end
        from pg_attribute a
        join pg_type t on t.oid = a.atttypid
        where a.attrelid = tbl and a.attname = col and not a.attisdropped
          and t.typname in ('varchar', 'bpchar')
    ), value)
$fn$;

-- A status the worker writes, of the type of the host's status column:
-- integration_outbox_as(value, model) is value as model's type (text,
-- varchar, or the host's enum type, whose values the install adds), for an
-- update that writes a status computed in the statement:
-- set status = integration_outbox_as(r.status, o.status). A literal needs
-- none: PostgreSQL gives it the column's type.
-- +goose StatementBegin
create or replace function integration_outbox_as(value text, model anyelement)
returns anyelement
language plpgsql stable parallel safe
as $fn$
begin
    return value;
end
$fn$;
-- +goose StatementEnd

-- +goose Down
set local lock_timeout = '5s';
drop function if exists integration_outbox_as(text, anyelement);
drop function if exists integration_outbox_fit(text, regclass, name);
