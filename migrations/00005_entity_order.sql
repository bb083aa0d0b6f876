-- Per-entity order: the claim takes a command only when no other command of
-- its (connection, entity) is in flight and none older waits. This index
-- answers that probe; it holds only the live rows (queued, failed,
-- processing), so completed rows, the bulk of the table, cost it nothing.

-- +goose Up
select integration_outbox_own_index(5, 'external_integration_outbox', 'external_integration_outbox_entity_idx',
    $def$(integration_connection_id, local_entity_id) where status in ('queued', 'failed', 'processing')$def$);

-- +goose Down
select integration_outbox_drop_owned(5);
