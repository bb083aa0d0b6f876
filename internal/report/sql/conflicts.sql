-- Lists the conflicts opened for the row @id of the organization
-- @organization_id, oldest first.

select c.id::text, c.conflict_type, c.severity, c.status, coalesce(c.summary, '') as summary,
    c.created_at::timestamptz, c.resolved_at, coalesce(c.resolution_reason, '') as resolution_reason
from external_integration_conflicts c
where c.organization_id = @organization_id::uuid and c.outbox_id = @id::uuid
order by c.created_at, c.id
