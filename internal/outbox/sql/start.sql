-- Consumes claims: one atomic update marks each job started for its token (a
-- stale token, an already started claim or a lease that has expired matches
-- nothing: the next dispatch may already be reclaiming that row) and extends
-- its lease to @lease_until, the end of the push, so that no reclaim takes a
-- job that is mid-call (a null @lease_until keeps the lease as it is). The
-- same statement loads the job's connection, organization scoped, and
-- whether it needs reauthorization (integration_outbox_connection_state):
-- such a job is held without a call, as the claim would have held it had
-- the mark come before the claim. The entity
-- a command acts on is not the outbox's business: each command loads its own,
-- in its own package. The requests come as one array per field: @ids,
-- @organization_ids, @claim_tokens, @connection_ids, @lease_until.

with req as (
    select * from unnest(@ids::text[]::uuid[], @organization_ids::text[]::uuid[], @claim_tokens::text[]::uuid[], @connection_ids::text[]::uuid[], @lease_until::timestamptz[])
        as r(id, organization_id, claim_token, connection_id, lease_until)
), started as (
    update external_integration_outbox o
    set started_at = now(), updated_at = now(),
        lease_expires_at = greatest(o.lease_expires_at, req.lease_until)
    from req
    where o.id = req.id and o.organization_id = req.organization_id
      and o.integration_connection_id is not distinct from req.connection_id
      and o.claim_token = req.claim_token
      and o.status = 'processing' and o.started_at is null
      and o.lease_expires_at > now()
    returning o.id, o.organization_id, o.integration_connection_id, o.command_type,
        o.local_entity_type, o.local_entity_id, o.payload_json, o.idempotency_key,
        o.attempt_count, o.claim_token
)
select s.id::text, s.organization_id::text, coalesce(s.integration_connection_id::text, ''),
    coalesce(s.command_type, ''), coalesce(s.local_entity_type, ''), coalesce(s.local_entity_id::text, ''),
    coalesce(s.payload_json::jsonb, '{}'::jsonb), coalesce(s.idempotency_key, s.id::text),
    s.attempt_count, s.claim_token::text,
    c.id is not null, coalesce(c.location_id::text, ''), coalesce(c.provider, ''),
    coalesce(c.credential_reference, ''), coalesce(c.config_json::jsonb, '{}'::jsonb),
    coalesce(cs.unauthorized_reason, case when cs.unauthorized_since is not null then 'the provider refused the connection''s grant' end, '')
from started s
left join integration_connections c
    on c.id = s.integration_connection_id and c.organization_id = s.organization_id
left join integration_outbox_connection_state cs
    on cs.connection_id = c.id and cs.organization_id = c.organization_id and cs.unauthorized_since is not null
