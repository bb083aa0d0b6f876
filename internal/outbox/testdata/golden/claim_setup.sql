
select set_config('plan_cache_mode', 'force_generic_plan', true),
    set_config('enable_bitmapscan', 'off', true),
    pg_advisory_xact_lock(hashtext($1))