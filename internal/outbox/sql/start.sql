-- Consumes claims: each job is marked started for its token by inserting
-- the token into integration_outbox_starts (on conflict do nothing), so of
-- two deliveries of one claim, even at the same moment, only one starts it;
-- a stale token, an already started or given-back claim, or a lease that
-- has expired starts nothing (the next dispatch may already be reclaiming
-- that row). The host's outbox row is only read: no version of it is
-- written, unless the claim's lease ends before @lease_until, the end of
-- the push; then the same statement extends the lease to it (a row update,
-- fenced by the token and the lease), so that no reclaim takes a job that
-- is mid-call, and a job whose extension finds the row claimed again does
-- not start. A null @lease_until keeps the lease as it is. The same
-- statement loads the job's connection, organization scoped, and whether
-- it needs reauthorization (integration_outbox_connection_state): such a
-- job is held without a call, as the claim would have held it had the mark
-- come before the claim. The entity a command acts on is not the outbox's
-- business: each command loads its own, in its own package
-- (fragment/job.sql: the job's columns and connection). The requests come
-- as one array per field: @ids, @organization_ids, @claim_tokens,
-- @connection_ids, @lease_until.

with req as (
    select * from unnest(@ids::text[]::uuid[], @organization_ids::text[]::uuid[], @claim_tokens::text[]::uuid[], @connection_ids::text[]::uuid[], @lease_until::timestamptz[])
        as r(id, organization_id, claim_token, connection_id, lease_until)
), locked as (
    -- The rows still claimed for the request's token, under a live lease,
    -- share-locked: a record of the same claim committed after this
    -- statement's snapshot (a duplicate delivery's) is seen here on the
    -- row's latest version, which is no longer processing, and the row is
    -- left out; without it, the record's delete of its start would let this
    -- insert go in. (started_at is set only by a start of an earlier version
    -- of this statement.)
    select o.id, o.organization_id, o.integration_connection_id, o.command_type,
        o.local_entity_type, o.local_entity_id, o.payload_json, o.idempotency_key,
        o.attempt_count, o.claim_token, o.lease_expires_at, req.lease_until, o.last_error
    from req
    join external_integration_outbox o
        on o.id = req.id and o.organization_id = req.organization_id
       and o.integration_connection_id is not distinct from req.connection_id
       and o.claim_token = req.claim_token
    where o.status = 'processing' and o.started_at is null
      and o.lease_expires_at > now()
    for share of o
), claimed as (
    -- One row a token (a request may repeat one); covered when its lease
    -- lasts to the end of the push.
    select distinct on (l.claim_token) l.id, l.organization_id, l.integration_connection_id, l.command_type,
        l.local_entity_type, l.local_entity_id, l.payload_json, l.idempotency_key,
        l.attempt_count, l.claim_token, l.lease_until, l.last_error,
        l.lease_until is null or l.lease_expires_at >= l.lease_until as covered
    from locked l
    order by l.claim_token
), started as (
    insert into integration_outbox_starts (claim_token, outbox_id, organization_id, started_at, attempt)
    select c.claim_token, c.id, c.organization_id, now(), c.attempt_count
    from claimed c
    order by c.claim_token
    on conflict (claim_token) do nothing
    returning claim_token
), extended as (
    update external_integration_outbox o
    set lease_expires_at = c.lease_until, updated_at = now()
    from claimed c
    join started s on s.claim_token = c.claim_token
    where not c.covered
      and o.id = c.id and o.organization_id = c.organization_id and o.claim_token = c.claim_token
      and o.status = 'processing' and o.lease_expires_at > now()
    returning o.id
), jobs as (
    select c.*
    from claimed c
    join started s on s.claim_token = c.claim_token
    where c.covered or c.id in (select e.id from extended e)
)
/*fragment:job*/ select null::text as id /*end:job*/
