-- Unknown outcomes: an attempt whose provider call may have made the
-- command's document without our hearing of it (a create that timed out,
-- lost its connection or was answered 5xx; a push that crashed after it
-- started) is marked in the attempt history, so that a later attempt of
-- the same row, or an operator's rerun, looks the document up at the
-- provider before it creates it again (docs/reliability.md, "Exactly once
-- in effect"). outcome_unknown: null or false, the attempt's outcome is
-- known. integration_outbox_starts.attempt: the attempt number a start was
-- made for, so that the dispatch run's sweep can write the history row of
-- a start no record ended (outcome lease_expired). Both tables are ours;
-- both columns are nullable without a default: adding them rewrites
-- nothing. The down step drops them again: no client but ours reads them,
-- and a build before this one names neither.
-- squawk-ignore-file ban-drop-column

-- +goose Up
-- This file touches only our own tables; a lock it cannot get within the
-- timeout is another session's: the run fails and can be repeated.
set local lock_timeout = '5s';
alter table external_integration_attempts add column if not exists outcome_unknown boolean;
alter table integration_outbox_starts add column if not exists attempt integer;

-- +goose Down
set local lock_timeout = '5s';
alter table integration_outbox_starts drop column if exists attempt;
alter table external_integration_attempts drop column if exists outcome_unknown;
