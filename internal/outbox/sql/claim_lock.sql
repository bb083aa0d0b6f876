-- Waits for the claims before this one to commit (the transaction-level
-- advisory lock @lock_key): claim_setup.sql without its settings, for a claim
-- that runs through its routine, which sets them for its own run
-- (internal/sqlroutine). No setting of the transaction changes, so a
-- transaction pooler has nothing to pin.

select pg_advisory_xact_lock(hashtext(@lock_key))
