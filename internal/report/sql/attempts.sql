-- Lists the attempt history of the row @id of the organization
-- @organization_id, oldest first.

select a.attempt, a.started_at, a.finished_at, a.outcome, a.provider_called, a.http_status,
    coalesce(a.error_excerpt, '') as error_excerpt, coalesce(a.provider_reference, '') as provider_reference,
    coalesce(a.provider_status, '') as provider_status, coalesce(a.outcome_unknown, false) as outcome_unknown
from external_integration_attempts a
where a.organization_id = @organization_id::uuid and a.outbox_id = @id::uuid
order by a.attempt, a.created_at, a.id
