-- Each connection's health as operators and the host see it, and the events
-- that tell the host about it: a connection whose every call fails with a
-- retryable error is failing (a connection_failing conflict once it has for
-- CONNECTION_FAILING_AFTER) and, after CONNECTION_DISABLE_AFTER, disabled (no
-- call, its rows held without charging attempts) until an operator enables it
-- again; a connection whose grant was revoked is unauthorized. The record
-- statement keeps this state (internal/outbox/sql/record.sql, its state_ CTEs)
-- and writes an event into integration_outbox_events in the same statement as
-- each change it causes; the dispatch run publishes them to EventBridge
-- (internal/event).

-- +goose Up
-- This file touches only our own tables; a lock it cannot get within the
-- timeout is another session's: the run fails and can be repeated.
set local lock_timeout = '5s';

-- One row per connection that has had a provider call recorded or was
-- marked unauthorized. failing_since: the first retryable failure since its
-- last success (null: not failing). disabled_at: disabled automatically
-- (null: enabled); enabled_at: when an operator last enabled it.
-- unauthorized_since: its grant must be renewed (null: authorized). The
-- *_conflict_id columns name the open external_integration_conflicts row of
-- each condition: the conflicts table has no unique index for connection
-- conflicts, so these columns are what keeps them to one open row each.
create table if not exists integration_outbox_connection_state (
    connection_id uuid primary key,
    organization_id uuid not null,
    provider text,
    failing_since timestamptz,
    last_failure_at timestamptz,
    last_success_at timestamptz,
    last_error text,
    disabled_at timestamptz,
    disabled_reason text,
    enabled_at timestamptz,
    unauthorized_since timestamptz,
    unauthorized_reason text,
    failing_conflict_id uuid,
    disabled_conflict_id uuid,
    unauthorized_conflict_id uuid,
    updated_at timestamptz not null default now()
);
create index if not exists integration_outbox_connection_state_org_idx
    on integration_outbox_connection_state (organization_id);

-- The events to publish to EventBridge, written in the transaction of the
-- change they report (at least once: published_at null until PutEvents
-- accepted the entry). id is the event's eventId. publish_after keeps an
-- entry a publisher took from being taken by another before it answers.
create table if not exists integration_outbox_events (
    id uuid primary key,
    detail_type text not null,
    organization_id uuid not null,
    connection_id uuid,
    detail jsonb not null,
    created_at timestamptz not null default now(),
    publish_after timestamptz not null default now(),
    publish_attempts integer not null default 0,
    last_error text,
    published_at timestamptz
);
create index if not exists integration_outbox_events_pending_idx
    on integration_outbox_events (publish_after) where published_at is null;
-- Published events are deleted a while after (internal/event).
create index if not exists integration_outbox_events_published_idx
    on integration_outbox_events (published_at) where published_at is not null;

-- +goose Down
set local lock_timeout = '5s';
drop table if exists integration_outbox_events;
drop table if exists integration_outbox_connection_state;
