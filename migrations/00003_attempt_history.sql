-- Attempt history (ours): one row per attempt whose result was recorded,
-- written by the same statement that records the result (internal/outbox
-- recordSQL). provider_called tells an attempt that reached the provider
-- from one that ended before the call (entity not found, unsupported,
-- credential rejected...); http_status is the provider's last answer, null
-- without an HTTP response. error_excerpt is the row's last_error of that
-- attempt, already masked by the worker and at most 1000 characters.
-- Retention (RETENTION_AGE) deletes a row's attempts with the row.

-- +goose Up
-- This file touches only our own tables and functions; a lock it cannot get
-- within the timeout is another session's: the run fails and can be repeated.
set local lock_timeout = '5s';
create table if not exists external_integration_attempts (
    id uuid primary key default gen_random_uuid(),
    outbox_id uuid not null,
    organization_id uuid not null,
    attempt integer not null,
    started_at timestamptz,
    finished_at timestamptz,
    outcome text not null,
    provider_called boolean not null default false,
    http_status integer,
    error_excerpt text,
    provider_reference text,
    provider_status text,
    created_at timestamptz not null default now()
);
create index if not exists external_integration_attempts_outbox_idx
    on external_integration_attempts (organization_id, outbox_id, attempt);

-- +goose Down
set local lock_timeout = '5s';
drop table if exists external_integration_attempts;
