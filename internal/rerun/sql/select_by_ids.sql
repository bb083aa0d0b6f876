-- Reads the rows @ids of the organization @organization_id (a dry run's read;
-- a rerun locks them: lock_by_ids.sql): what the rerun needs to decide per
-- row, oldest first.

select id::text, status, attempt_count
from external_integration_outbox
where organization_id = @organization_id::uuid and id = any(@ids::uuid[])
order by created_at, id
