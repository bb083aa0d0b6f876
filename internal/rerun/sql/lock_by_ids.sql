-- The rerun's locking read of the rows @ids of the organization
-- @organization_id: select_by_ids.sql for update. A concurrent claim, start
-- or record waits for the rerun's transaction (or the rerun waits for it and
-- then reads the row's new state), so the status checked is the status
-- requeued. Rows are locked in created_at order, the order every rerun uses.

select id::text, status, attempt_count
from external_integration_outbox
where organization_id = @organization_id::uuid and id = any(@ids::uuid[])
order by created_at, id
for update
