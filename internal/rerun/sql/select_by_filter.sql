-- Reads up to @limit rows of the organization @organization_id matching a
-- filter, oldest first (a dry run's read; a rerun locks them:
-- lock_by_filter.sql): status one of @statuses and, each when not null, of
-- the connection @connection_id, of the command type @command_type, created
-- at or after @created_after, created before @created_before.

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
