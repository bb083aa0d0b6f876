-- Each connection's provider calls paced across the fleet: the providers
-- whose calls are limited per minute (Xero, QuickBooks Online) get one slot
-- at a time, spaced by the limit, whichever container calls; a 429 pauses
-- the whole connection until the provider's Retry-After, and the claim takes
-- no row of a paused connection (internal/pace, the claim's
-- fragment/connection_room.sql).

-- +goose Up
-- This file touches only our own tables; a lock it cannot get within the
-- timeout is another session's: the run fails and can be repeated.
set local lock_timeout = '5s';

-- One row per connection that has called a paced provider or was paused.
-- next_call_at: the earliest time of its next call (the slots before it are
-- taken). paused_until: no call and no claim before it (null: not paused);
-- pause_reason says why (the provider's answer).
create table if not exists integration_outbox_connection_pace (
    connection_id uuid primary key,
    organization_id uuid not null,
    next_call_at timestamptz not null,
    paused_until timestamptz,
    pause_reason text,
    updated_at timestamptz not null default now()
);

-- +goose Down
set local lock_timeout = '5s';
drop table if exists integration_outbox_connection_pace;
