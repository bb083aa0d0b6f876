-- A command may wait for another: a purchase order whose supplier has no
-- contact yet waits for that supplier's push_supplier. The column that names
-- the awaited row and the two indexes that find waiting rows and pending
-- supplier pushes are on the host's outbox, so they are declared with this
-- version in internal/migrate/hostobjects.go (the column added, the indexes
-- built CONCURRENTLY) before this file runs; this file itself changes
-- nothing.

-- +goose Up
set local lock_timeout = '5s';
select 1;

-- +goose Down
set local lock_timeout = '5s';
select 1;
