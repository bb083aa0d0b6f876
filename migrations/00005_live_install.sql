-- Live install: columns, constraints and indexes on the host's tables are
-- now added and dropped by internal/migrate's Installer without blocking the
-- host's writes (see internal/migrate/hostobjects.go). Installs made before
-- it still have the plpgsql ownership functions of migration 1, which built
-- indexes inside the migration's transaction; nothing calls them any more.

-- +goose Up
-- This file touches only our own tables and functions; a lock it cannot get
-- within the timeout is another session's: the run fails and can be repeated.
set local lock_timeout = '5s';
drop function if exists integration_outbox_drop_owned(bigint);
drop function if exists integration_outbox_own_index(bigint, text, text, text, boolean);
drop function if exists integration_outbox_own_constraint(bigint, text, text, text);
drop function if exists integration_outbox_own_column(bigint, text, text, text);

-- +goose Down
set local lock_timeout = '5s';
-- Nothing to restore: no step calls the old functions (a fresh install never
-- had them), and the bookkeeping table they wrote stays with migration 1.
select 1;
