-- The claim reads, once per claim, the connections it gives no room or one
-- probe (internal/outbox/sql/fragment/halts.sql): circuits open or half-open,
-- connections their provider paused, connections disabled or waiting for
-- reauthorization. Our own tables keep a row per connection that ever
-- failed, was paced or was stopped; these partial indexes hold only the
-- halted ones, so that read costs what is halted, not every connection with
-- a history. They touch only our own tables, which hold a row per
-- connection (thousands, not the outbox's millions): each build takes
-- milliseconds, and a push's write to the table waits no longer than that.
-- squawk-ignore-file require-concurrent-index-creation, require-concurrent-index-deletion

-- +goose Up
-- A lock it cannot get within the timeout is another session's: the run
-- fails and can be repeated.
set local lock_timeout = '5s';

create index if not exists integration_outbox_connection_health_open_idx
    on integration_outbox_connection_health (open_until) include (connection_id)
    where open_until is not null;

create index if not exists integration_outbox_connection_pace_paused_idx
    on integration_outbox_connection_pace (paused_until) include (connection_id)
    where paused_until is not null;

create index if not exists integration_outbox_connection_state_stopped_idx
    on integration_outbox_connection_state (connection_id)
    where disabled_at is not null or unauthorized_since is not null;

-- +goose Down
set local lock_timeout = '5s';
drop index if exists integration_outbox_connection_state_stopped_idx;
drop index if exists integration_outbox_connection_pace_paused_idx;
drop index if exists integration_outbox_connection_health_open_idx;
