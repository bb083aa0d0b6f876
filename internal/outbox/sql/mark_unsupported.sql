-- Ends claimed rows nobody can deliver (@reason says why). The claims come as
-- one array per column: @ids, @organization_ids, @claim_tokens,
-- @connection_ids.

update external_integration_outbox o
set status = 'unsupported',
    completed_at = now(),
    last_error = integration_outbox_fit(@reason::text, 'external_integration_outbox', 'last_error'),
    lease_expires_at = null,
    updated_at = now()
from unnest(@ids::text[]::uuid[], @organization_ids::text[]::uuid[], @claim_tokens::text[]::uuid[], @connection_ids::text[]::uuid[]) as r(id, organization_id, claim_token, connection_id)
where o.id = r.id and o.organization_id = r.organization_id
  and o.integration_connection_id is not distinct from r.connection_id
  and o.claim_token = r.claim_token and o.status = 'processing'
