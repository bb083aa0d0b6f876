-- Resolves the open conflicts of the requeued rows @ids of the organization
-- @organization_id with the rerun's reason (@reason).

update external_integration_conflicts
set status = 'resolved',
    resolved_at = now(),
    resolution_reason = @reason::text
where organization_id = @organization_id::uuid and outbox_id = any(@ids::uuid[]) and status = 'open'
