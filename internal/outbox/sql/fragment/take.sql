-- How a claim takes its candidates (the statement's CTE every_candidate: a
-- row's id, organization, connection, created_at, whether it is reclaimed
-- and whether its connection keeps per-entity order), once each claim
-- statement has found them:
--
-- - heads: of the candidates of one ordered entity only the oldest may go;
--   the others are behind it, and it has followers;
-- - room: at most the connection's room of each connection's (conns: org,
--   conn, room, probe, paused);
-- - pick: at most the claim's room (budget), organizations taking turns in
--   rotation order (after @after_organization, wrapping around), oldest
--   first within each;
-- - lock: each picked row locked (a row another transaction holds is
--   skipped) and checked again on its latest version: a result recorded
--   since the statement's snapshot leaves its row alone;
-- - update: each gets status processing, attempt_count + 1, a fresh claim
--   token and a lease of @lease_seconds.
--
-- It returns each claimed row with held, which says whether an in-flight
-- cap (global or a connection's; pairs_held: the statement's own finding)
-- held due rows back: rows in flight free that room, so the dispatcher may
-- wait for it. Rows held by the breaker, by a provider's pause or by
-- per-entity order do not count. With no row claimed one row comes back,
-- its claim columns null. Per-entity order can be waited for too, but only
-- behind the run's own rows: each claimed row says whether due commands of
-- its ordered entity wait behind it (followers: a candidate of this claim
-- that it holds back, or a row parked waiting for it), and held_behind says whether one of @heads (the
-- run's claimed rows that had followers) is still in flight, leased and
-- without a result, or has ended with a follower still parked behind it:
-- once it is recorded, the next claim takes its follower;
-- or one of @awaited (the run's claimed rows others may wait for: a
-- supplier's push) is, with a row waiting for it: its result wakes that row.
--
-- Stand-in context: budget, every_candidate, conns and pairs_held.

with budget as (
    select 0 as room
), every_candidate as (
    select id, organization_id, integration_connection_id, created_at, false as reclaimed, false as ordered,
        local_entity_type, local_entity_id
    from external_integration_outbox limit 0
), conns as (
    select null::uuid as org, null::uuid as conn, 0 as room, false as probe, false as paused
), pairs_held as (
    select false as held
)
/*begin:take*/
, heads as (
    select c.*, c.ordered and c.local_entity_id is not null and row_number() over e > 1 as behind,
        c.ordered and c.local_entity_id is not null and count(*) over e > 1 as followers
    from every_candidate c
    window e as (partition by c.integration_connection_id, c.local_entity_type, c.local_entity_id
                 order by c.created_at, c.id rows between unbounded preceding and unbounded following)
), ranked as (
    select c.*, coalesce(k.probe, false) as probe, coalesce(k.paused, false) as paused,
        c.integration_connection_id is null or c.conn_rank <= k.room as within
    from (
        select c.*, row_number() over (
                partition by c.organization_id, c.integration_connection_id order by c.created_at) as conn_rank
        from heads c
        where not c.behind
    ) c
    left join conns k on k.org = c.organization_id and k.conn = c.integration_connection_id
), picked as (
    select a.id, a.reclaimed, a.probe
    from (
        select a.*, row_number() over (partition by a.organization_id order by a.created_at) as org_rank
        from ranked a
        where a.within
    ) a
    order by a.org_rank, a.organization_id <= @after_organization::uuid, a.organization_id, a.created_at
    limit (select room from budget)
), locked as (
    select o.id, p.reclaimed, p.probe
    from picked p
    join external_integration_outbox o on o.id = p.id
    where o.attempt_count < @max_attempts
      and ((o.status in ('queued', 'failed') and coalesce(o.next_attempt_at, now()) <= now())
        or (o.status = 'processing' and o.provider_status is null and o.lease_expires_at < now())
        or (o.status = 'processing' and o.provider_status is not null and o.next_attempt_at <= now()))
    for update of o skip locked
), claimed as (
    update external_integration_outbox o
    set status = 'processing',
        attempt_count = o.attempt_count + 1,
        claim_token = gen_random_uuid(),
        claimed_at = now(),
        lease_expires_at = now() + make_interval(secs => @lease_seconds),
        started_at = null,
        next_attempt_at = null,
        provider_status = null,
        -- A claimed row waits for nothing: its record says again what it
        -- waits for, if it still does.
        waiting_for_outbox_id = null,
        updated_at = now()
    from locked
    where o.id = locked.id
    returning o.id, o.organization_id, o.integration_connection_id, o.command_type, o.claim_token,
        o.attempt_count, locked.reclaimed, locked.probe, o.created_at
), held as (
    select ((select room from budget) < @claim_limit::int
            and (select count(*) from picked) >= (select room from budget))
        or (select held from pairs_held)
        or exists (select 1 from ranked where not within and not probe and not paused) as held,
        exists (select 1 from unnest(@heads::text[]::uuid[]) as r(id)
                join external_integration_outbox h on h.id = r.id
                where h.status = 'processing' and h.provider_status is null and h.lease_expires_at > now())
        -- A head that ended without waking its follower after the run's
        -- wake_followers.sql read it in flight (a separate statement, an
        -- older snapshot): the follower is still parked behind it, and the
        -- next claim's wake takes it.
        or exists (select 1 from unnest(@heads::text[]::uuid[]) as r(id)
                cross join lateral (
                    select 1 from external_integration_outbox w
                    where w.waiting_for_outbox_id is not null and w.waiting_for_outbox_id = r.id
                      and w.status = 'queued'
                    limit 1) w
                where not exists (select 1 from external_integration_outbox a
                                  where a.id = r.id and a.status in ('queued', 'failed', 'processing')))
        or exists (select 1 from unnest(@awaited::text[]::uuid[]) as r(id)
                join external_integration_outbox h on h.id = r.id
                cross join lateral (
                    select 1 from external_integration_outbox w
                    where w.waiting_for_outbox_id is not null and w.waiting_for_outbox_id = h.id
                      and w.status in ('queued', 'failed')
                    limit 1) w
                where h.status = 'processing' and h.provider_status is null and h.lease_expires_at > now()) as held_behind
)
-- The waiting index is read by a probe per id (lateral, one row at most):
-- as a join, an EXISTS or IN, the generic plan may read all of it, as a hash
-- of its ids or as a join's outer side, where the statistics say that few
-- rows wait. They are those of before the followers were parked until
-- autovacuum analyzes the table again (10% of its rows changed): every
-- claim then read every parked row (10,000 of them: 2.8 times the claim
-- without them at 1M rows; TestAClaimReadsNoParkedFollower).
select c.id::text, c.organization_id::text, coalesce(c.integration_connection_id::text, ''),
    coalesce(c.command_type, ''), c.claim_token::text, c.attempt_count, c.reclaimed, c.probe, c.created_at,
    coalesce(f.followers, false) or coalesce(pf.parked, false) as followers,
    h.held, h.held_behind
from held h
left join claimed c on true
left join heads f on f.id = c.id
-- A follower parked behind the claimed row (what the run waits for).
left join lateral (
    select true as parked from external_integration_outbox w
    where w.waiting_for_outbox_id is not null and w.waiting_for_outbox_id = c.id
      and w.status = 'queued'
    limit 1) pf on true
/*end:take*/
