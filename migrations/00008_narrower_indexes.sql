-- Fewer and narrower indexes on the host's outbox: each host insert of a
-- queued command writes fewer index entries. The indexes this version drops
-- (of migration 1) and the narrower one it adds are on the host's table, so
-- they are declared with this version in internal/migrate/hostobjects.go and
-- built and dropped CONCURRENTLY before this file runs; its down step builds
-- the dropped ones again. This file itself changes nothing.

-- +goose Up
set local lock_timeout = '5s';
select 1;

-- +goose Down
set local lock_timeout = '5s';
select 1;
