-- Records one rerun of the organization @organization_id: who asked
-- (@requested_by, null when unknown) and why (@reason), its payload, the
-- rows it requeued (@affected_ids), the ones it skipped with why (@skipped)
-- and whether it dispatched them at once (@dispatch_now). Returns the audit
-- row's id.

insert into external_integration_rerun_audit (organization_id, requested_by, reason, payload,
    affected_ids, skipped, dispatch_now)
values (@organization_id::uuid, @requested_by::text, @reason::text, @payload::jsonb, @affected_ids::uuid[],
    @skipped::jsonb, @dispatch_now::boolean)
returning id::text
