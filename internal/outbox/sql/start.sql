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
-- in its own package (fragment/job.sql: the job's columns and connection).
-- The requests come as one array per field: @ids,
-- @organization_ids, @claim_tokens, @connection_ids, @lease_until.

with req as (
    select * from unnest(@ids::text[]::uuid[], @organization_ids::text[]::uuid[], @claim_tokens::text[]::uuid[], @connection_ids::text[]::uuid[], @lease_until::timestamptz[])
        as r(id, organization_id, claim_token, connection_id, lease_until)
), jobs as (
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
/*fragment:job*/ select null::text as id /*end:job*/
