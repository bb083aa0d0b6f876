-- The host's own inserts stop paying for the per-entity order's index:
-- external_integration_outbox_entity_order_idx (only the rows the claim's
-- walk may pass by: failed, queued but due later, processing) replaces
-- external_integration_outbox_entity_idx (every queued, failed and processing
-- row). Both are indexes of ours on the host's outbox, so they are declared
-- with this version in internal/migrate/hostobjects.go: the new one is built
-- CONCURRENTLY, then the old one is dropped CONCURRENTLY, before this file
-- runs; the down step builds the old one again and drops the new one. This
-- file itself changes nothing.

-- +goose Up
set local lock_timeout = '5s';
select 1;

-- +goose Down
set local lock_timeout = '5s';
select 1;
