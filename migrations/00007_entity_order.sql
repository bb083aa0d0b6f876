-- Per-entity order: the claim takes a command only when no other command of
-- its (connection, entity) is in flight and none older waits. The index that
-- answers that probe is on the host's outbox, so it is declared with this
-- version in internal/migrate/hostobjects.go and built CONCURRENTLY before
-- this file runs; this file itself changes nothing.

-- +goose Up
set local lock_timeout = '5s';
select 1;

-- +goose Down
set local lock_timeout = '5s';
select 1;
