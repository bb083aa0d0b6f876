-- Prepares the transaction of a claim sent plain, where the claim's
-- routine is missing (internal/sqlroutine; claim_lock.sql otherwise, the
-- routine setting these for its own run): the claim is planned as a generic
-- plan (its many CTEs cost far more to plan than to run), with index scans
-- only, without JIT, and it waits for the claims before it to commit (the
-- transaction-level advisory lock @lock_key).
--
-- Index scans only: every step of the claim is a short probe of a partial
-- index (the walk's next pair, a pair's oldest due rows, an entity's
-- commands) that stops after a row or a batch. When few of the outbox's pages
-- are all-visible (after a bulk load, a restore, VACUUM FULL, or on a small
-- hot table) the planner prices those probes' heap visits high and turns the
-- walk's step into a bitmap scan of every due row, or a sequential scan: 80
-- times slower at 10% all-visible (bench/results.md). Off for this
-- transaction only, those plans are not considered while an index can serve.
--
-- JIT off: a claim's work is milliseconds of index probes; JIT would compile
-- hundreds of functions at every execution, even of the cached plan. Our
-- connections set nothing on their session (a pooler refuses or pins it).

select set_config('plan_cache_mode', 'force_generic_plan', true),
    set_config('enable_bitmapscan', 'off', true),
    set_config('jit', 'off', true),
    pg_advisory_xact_lock(hashtext(@lock_key))
