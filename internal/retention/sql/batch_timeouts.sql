-- Bounds one batch's transaction: it gives up rather than queue behind a
-- lock (lock_timeout, @lock_timeout) or run long (statement_timeout,
-- @statement_timeout); each a setting's text, such as '1000ms'.

select set_config('lock_timeout', @lock_timeout::text, true),
    set_config('statement_timeout', @statement_timeout::text, true)
