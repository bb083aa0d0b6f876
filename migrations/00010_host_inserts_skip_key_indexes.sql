-- The host's own inserts stop paying for the legacy key index. The change is
-- to idempotency_enforced, a column of ours on the host's outbox, so it is
-- declared with this version in internal/migrate/hostobjects.go and made
-- before this file runs, under a brief lock_timeout retried with backoff:
-- its NOT NULL and its default are dropped (a catalog change, no scan, no
-- rewrite). Rows already in the table keep reading false, and the enqueue
-- keeps honouring their keys through external_integration_outbox_legacy_key_idx;
-- a row the host inserts from now on reads NULL and enters neither key index.
-- The down step sets the default back (NOT NULL stays dropped: setting it
-- again scans the table under an exclusive lock). This file itself changes
-- nothing.

-- +goose Up
set local lock_timeout = '5s';
select 1;

-- +goose Down
set local lock_timeout = '5s';
select 1;
