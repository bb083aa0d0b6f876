-- Puts claimed rows whose message could not be sent back at once: due now,
-- the attempt not consumed, the claim dropped.

update external_integration_outbox o
set status = 'queued',
    attempt_count = greatest(o.attempt_count - 1, 0),
    claim_token = null,
    claimed_at = null,
    lease_expires_at = null,
    next_attempt_at = null,
    updated_at = now()
from unnest($1::text[]::uuid[], $2::text[]::uuid[], $3::text[]::uuid[], $4::text[]::uuid[]) as r(id, organization_id, claim_token, connection_id)
where o.id = r.id and o.organization_id = r.organization_id
  and o.integration_connection_id is not distinct from r.connection_id
  and o.claim_token = r.claim_token and o.status = 'processing' and o.started_at is null
