-- The declared lengths of the host outbox's text columns the record writes
-- (varchar(n) or char(n); a column without one is not returned), read once
-- per store and again after a value did not fit (22001): Store.Record cuts
-- the texts it sends to them (textlengths.go).

select a.attname::text, a.atttypmod - 4
from pg_attribute a
join pg_type t on t.oid = a.atttypid
where a.attrelid = to_regclass('external_integration_outbox')
  and a.attname in ('last_error', 'provider_reference', 'provider_status')
  and not a.attisdropped and a.atttypmod > 4 and t.typname in ('varchar', 'bpchar')
