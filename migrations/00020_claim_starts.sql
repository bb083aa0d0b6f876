-- Where a push marks its job started: one row per consumed claim, in a
-- narrow table of ours instead of a version of the host's outbox row, so a
-- delivered command writes three versions of that row (the host's insert,
-- the claim, the record) instead of four.
--
-- The primary key is the claim token: the start inserts its token (on
-- conflict do nothing) and only the statement whose insert went in calls
-- the provider, so a duplicate SQS delivery, even one running at the same
-- moment, finds the claim taken (internal/outbox/sql/start.sql). The
-- dispatcher's release of a claim whose message may have been sent consumes
-- the token the same way (started_at null), so a start and a release of one
-- claim cannot both win (release.sql). The record of a result requires its
-- token's start and deletes it (record.sql): the table holds the jobs in
-- flight; what a crash or a release leaves is deleted by the dispatch run's
-- dead_letter_expired.sql once the outbox row no longer holds that claim.

-- +goose Up
-- This file touches only our own tables; a lock it cannot get within the
-- timeout is another session's: the run fails and can be repeated.
set local lock_timeout = '5s';

create table if not exists integration_outbox_starts (
    claim_token uuid primary key,
    outbox_id uuid not null,
    organization_id uuid not null,
    -- When the push started the job; null: the claim was given back
    -- before any start (release.sql).
    started_at timestamptz,
    created_at timestamptz not null default now()
);

-- +goose Down
set local lock_timeout = '5s';
drop table if exists integration_outbox_starts;
