-- Followers parked: a due command held back under per-entity order leaves
-- the claim's walk index while it waits, so a claim no longer reads the
-- commands behind a busy entity at every run. The walk index that holds no
-- parked row replaces the one of migration 11 on the host's outbox, so it
-- is declared with this version in internal/migrate/hostobjects.go (built
-- CONCURRENTLY before the old one is dropped CONCURRENTLY) before this file
-- runs; this file itself changes nothing.

-- +goose Up
set local lock_timeout = '5s';
select 1;

-- +goose Down
set local lock_timeout = '5s';
select 1;
