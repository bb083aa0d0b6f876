-- Ends claimed rows nobody can deliver ($5 says why).

update external_integration_outbox o
set status = 'unsupported',
    completed_at = now(),
    last_error = $5,
    lease_expires_at = null,
    updated_at = now()
from unnest($1::text[]::uuid[], $2::text[]::uuid[], $3::text[]::uuid[], $4::text[]::uuid[]) as r(id, organization_id, claim_token, connection_id)
where o.id = r.id and o.organization_id = r.organization_id
  and o.integration_connection_id is not distinct from r.connection_id
  and o.claim_token = r.claim_token and o.status = 'processing'
