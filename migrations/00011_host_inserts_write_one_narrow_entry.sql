-- The host's own inserts write one narrow entry into one index of ours:
-- external_integration_outbox_entity_order_idx (only the rows the claim's
-- walk may pass by: failed, queued but due later, processing) replaces
-- external_integration_outbox_entity_idx (every queued, failed and processing
-- row), and external_integration_outbox_walk_idx replaces
-- external_integration_outbox_claim_walk_idx (the same key, without the
-- included next_attempt_at and attempt_count). They are indexes of ours on
-- the host's outbox, so they are declared with this version in
-- internal/migrate/hostobjects.go: the new ones are built CONCURRENTLY, then
-- the old ones dropped CONCURRENTLY, before this file runs; the down step
-- builds the old ones again and drops the new ones. This file itself changes
-- nothing.

-- +goose Up
set local lock_timeout = '5s';
select 1;

-- +goose Down
set local lock_timeout = '5s';
select 1;
