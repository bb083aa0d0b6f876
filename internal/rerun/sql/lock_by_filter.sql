-- The rerun's locking read of up to @limit rows of the organization
-- @organization_id matching a filter: select_by_filter.sql for update, with
-- its arguments. A concurrent claim, start or record waits for the rerun's
-- transaction (or the rerun waits for it and then reads the row's new
-- state), so the status checked is the status requeued. Rows are locked in
-- created_at order, the order every rerun uses.

select id::text, status::text, attempt_count
from external_integration_outbox
where organization_id = @organization_id::uuid
  and status::text = any(@statuses::text[])
  and status in ('failed', 'dead_letter', 'uncertain') -- the requeueable ones; lets the tenant index of those rows serve the scan
  and (@connection_id::uuid is null or integration_connection_id = @connection_id::uuid)
  and (@command_type::text is null or command_type = @command_type::text)
  and (@created_after::timestamptz is null or created_at >= @created_after::timestamptz)
  and (@created_before::timestamptz is null or created_at < @created_before::timestamptz)
order by created_at, id
limit @limit::bigint
for update
