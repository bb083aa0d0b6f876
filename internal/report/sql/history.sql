-- Lists the reruns of the organization @organization_id that requeued or
-- skipped its row @id, oldest first: whether each requeued it, else why it
-- skipped it.

select a.id::text as audit_id, a.created_at, coalesce(a.requested_by, '') as requested_by, a.reason,
    a.dispatch_now, @id::uuid = any(a.affected_ids) as requeued,
    coalesce((select s->>'reason' from jsonb_array_elements(a.skipped) s
              where s->>'id' = @id::uuid::text limit 1), '') as skip_reason
from external_integration_rerun_audit a
where a.organization_id = @organization_id::uuid
  and (@id::uuid = any(a.affected_ids)
       or a.skipped @> jsonb_build_array(jsonb_build_object('id', @id::uuid::text)))
order by a.created_at, a.id
