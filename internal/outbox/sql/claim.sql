-- Claims up to @claim_limit rows, within the in-flight limits, organizations
-- interleaved in one rotation: every organization with a claimable row gets a
-- turn before any gets a second one, oldest first within each. Candidates:
-- due rows of the claimable states; rows whose lease expired before the
-- provider accepted them (crash recovery); rows the provider accepted whose
-- follow-up is due (pushed again with the same idempotency key, so the
-- provider can say it is done); and due rows without a connection. Every kind
-- takes its turn in the same rotation: the order of organizations starts
-- after @after_organization (the dispatcher moves it on after each claim) and
-- wraps around.
--
-- The due rows come from a skip scan over the (organization, connection)
-- pairs of the walk index (walk_idx), in rotation order; it stops once it has as
-- many organizations with a claimable row as the claim may take, so a claim
-- costs O(batch) index probes however many rows and tenants wait, plus, in
-- a walked pair, a row read and an entity_head probe for each due row that
-- per-entity order holds back ahead of the pair's first claimable one (the
-- walk index does not hold the entity). Those are read once: the pair's
-- probe (pair_eligibility) returns the created_at of its first claimable row
-- (first_at), and its due rows are read from there.
--
-- Limits: at most @max_in_flight leased rows across all organizations (0:
-- none), at most the connection's config_json.maxInFlight, else its
-- provider's default (@provider_max_in_flight), else
-- @connection_max_in_flight (0: none), leased rows per connection; none of
-- a connection its provider paused (a 429, until its Retry-After). With the
-- circuit breaker on (@circuit_on): no row of a connection whose circuit is
-- open, and one probe row at a time (none other in flight) once its cooldown
-- is over; with it off, no circuit state is read and every circuit is reset.
--
-- Per-entity order: on a connection whose config_json.ordered is not false, a
-- row is claimed only when no other row of its (connection, entity type,
-- entity) is in flight (processing, accepted rows included) and none older
-- waits (queued, failed): one at a time, oldest created_at first. An
-- accepted row's follow-up waits only for a row under a live lease or an
-- older accepted one (entity_free): of two accepted rows of an entity the
-- older goes first. The rows the
-- walk may pass by (failed, queued but due later, processing) are probed in
-- the entity order index (entity_head); a queued row due from the start,
-- which the host's inserts keep out of every index but the walk's, is met by
-- the walk before any newer command of its entity, so of the walk's
-- candidates of one entity only the oldest goes (heads); an older due row
-- that the walk brings too does not hold the newer ones in entity_head
-- either. Rows the walk does not bring (listed ids, reclaims) also probe the
-- walk index for older queued and failed rows (entity_no_older_queued).
--
-- @max_attempts: MAX_ATTEMPTS; @lease_seconds: the lease; @organization_id:
-- an optional organization; @ids: an optional id list (a rerun's
-- dispatchNow).
--
-- Callers serialize claims (claim_setup.sql: an advisory lock): each counts
-- what is in flight and which entities are busy, which two claims at once
-- would both miss.
--
-- Each claimed row comes back with held, which says whether an in-flight cap
-- (global or a connection's) held due rows back: rows in flight free that
-- room, so the dispatcher may wait for it. Rows held by the breaker, by a
-- provider's pause or by per-entity order do not count. With no row claimed one row comes back, its
-- claim columns null.
--
-- Per-entity order can be waited for too, but only behind the run's own rows:
-- each claimed row says whether due commands of its ordered entity wait
-- behind it (followers: a candidate of this claim that it holds back; a
-- command further down its pair than the walk read is not seen), and
-- held_behind says whether one of @heads (the
-- run's claimed rows that had followers) is still in flight, leased and
-- without a result: once it is recorded, the next claim takes its follower.

with recursive budget as (
    select case when @max_in_flight::int > 0 then greatest(0, least(@claim_limit::int, @max_in_flight::int - (
            select count(*) from (
                select 1 from external_integration_outbox
                where status = 'processing' and provider_status is null and lease_expires_at > now()
                limit @max_in_flight::int) leased)::int))
        else @claim_limit::int end as room
), circuit_reset as (
    delete from integration_outbox_connection_health where not @circuit_on::bool
), walk(org, conn, lap, room, probe, ordered, ok, held, org_ok, found, first_at) as (
    select p.org, p.conn, p.lap, e.room, e.probe, e.ordered, e.ok, e.held, e.ok, e.ok::int, e.first_at
    from (
        select * from (
            (select o.organization_id as org, o.integration_connection_id as conn, 0 as lap
             from external_integration_outbox o
             where o.status in ('queued', 'failed') and o.integration_connection_id is not null
               and o.organization_id > @after_organization::uuid and (@organization_id::uuid is null or o.organization_id = @organization_id)
             order by o.organization_id, o.integration_connection_id
             limit 1)
            union all
            (select o.organization_id, o.integration_connection_id, 1
             from external_integration_outbox o
             where o.status in ('queued', 'failed') and o.integration_connection_id is not null
               and (@organization_id::uuid is null or o.organization_id = @organization_id)
             order by o.organization_id, o.integration_connection_id
             limit 1)
        ) first_pair
        limit 1
    ) p
    cross join lateral (/*fragment:pair_eligibility*/) e
    where @ids::text[] is null and (select room from budget) > 0
  union all
    select p.org, p.conn, p.lap, e.room, e.probe, e.ordered, e.ok, e.held,
        e.ok or (p.org = w.org and w.org_ok),
        w.found + case when e.ok and not (p.org = w.org and w.org_ok) then 1 else 0 end, e.first_at
    from walk w
    cross join lateral (
        select * from (
            (select o.organization_id as org, o.integration_connection_id as conn, w.lap as lap
             from external_integration_outbox o
             where o.status in ('queued', 'failed') and o.integration_connection_id is not null
               and o.organization_id = w.org and o.integration_connection_id > w.conn
             order by o.integration_connection_id
             limit 1)
            union all
            (select o.organization_id, o.integration_connection_id, w.lap
             from external_integration_outbox o
             where o.status in ('queued', 'failed') and o.integration_connection_id is not null
               and o.organization_id > w.org and (@organization_id::uuid is null or o.organization_id = @organization_id)
             order by o.organization_id, o.integration_connection_id
             limit 1)
            union all
            (select o.organization_id, o.integration_connection_id, 1
             from external_integration_outbox o
             where o.status in ('queued', 'failed') and o.integration_connection_id is not null
               and w.lap = 0 and (@organization_id::uuid is null or o.organization_id = @organization_id)
             order by o.organization_id, o.integration_connection_id
             limit 1)
        ) next_pair
        limit 1
    ) p
    cross join lateral (/*fragment:pair_eligibility*/) e
    where w.found < (select room from budget) and (p.lap = 0 or p.org <= @after_organization::uuid)
), walked as (
    select * from walk where ok
), due as (
    select d.id, d.organization_id, d.integration_connection_id, d.created_at, false as reclaimed,
        w.ordered, d.local_entity_type, d.local_entity_id
    from walked w
    cross join lateral (
        select d.id, d.organization_id, d.integration_connection_id, d.created_at, d.local_entity_type, d.local_entity_id
        from external_integration_outbox d
        where d.organization_id = w.org and d.integration_connection_id = w.conn
          and d.created_at >= w.first_at
          and d.status in ('queued', 'failed')
          and coalesce(d.next_attempt_at, now()) <= now()
          and d.attempt_count < @max_attempts
          and (not w.ordered or /*fragment:entity_head*/)
        order by d.created_at
        -- Enough for this organization to fill the batch if the others
        -- have one row each.
        -- One more than the room shows a pair the limit holds back.
        limit least(w.room + 1, greatest((select room from budget) - (select count(distinct org) from walked)::int + 1, 1))
    ) d
), orphan as (
    select id, organization_id, integration_connection_id, created_at, false as reclaimed,
        false as ordered, local_entity_type, local_entity_id
    from (
        select o.*, row_number() over (partition by o.organization_id order by o.created_at) as turn
        from external_integration_outbox o
        where o.status in ('queued', 'failed') and o.integration_connection_id is null
          and coalesce(o.next_attempt_at, now()) <= now()
          and o.attempt_count < @max_attempts
          and (@organization_id::uuid is null or o.organization_id = @organization_id)
          and @ids::text[] is null
    ) o
    /*fragment:take_turns*/
), listed as (
    select d.id, d.organization_id, d.integration_connection_id, d.created_at, false as reclaimed,
        coalesce(c.config_json -> 'ordered', 'true'::jsonb) <> 'false'::jsonb as ordered,
        d.local_entity_type, d.local_entity_id
    from external_integration_outbox d
    left join integration_connections c
        on c.id = d.integration_connection_id and c.organization_id = d.organization_id
    where @ids::text[] is not null and d.id = any(@ids::text[]::uuid[])
      and d.status in ('queued', 'failed')
      and coalesce(d.next_attempt_at, now()) <= now()
      and d.attempt_count < @max_attempts
      and (@organization_id::uuid is null or d.organization_id = @organization_id)
      and (coalesce(c.config_json -> 'ordered', 'true'::jsonb) = 'false'::jsonb
           or (/*fragment:entity_head*/ and /*fragment:entity_no_older_queued*/))
    order by d.created_at
    limit (select room from budget)
), expired as (
    select id, organization_id, integration_connection_id, created_at, true as reclaimed,
        ordered, local_entity_type, local_entity_id
    from (
        select d.*, coalesce(c.config_json -> 'ordered', 'true'::jsonb) <> 'false'::jsonb as ordered,
            row_number() over (partition by d.organization_id order by d.created_at) as turn
        from external_integration_outbox d
        left join integration_connections c
            on c.id = d.integration_connection_id and c.organization_id = d.organization_id
        where d.status = 'processing' and d.provider_status is null
          and d.lease_expires_at < now()
          and d.attempt_count < @max_attempts
          and (@organization_id::uuid is null or d.organization_id = @organization_id)
          and (@ids::text[] is null or d.id = any(@ids::text[]::uuid[]))
          and (coalesce(c.config_json -> 'ordered', 'true'::jsonb) = 'false'::jsonb
               or (/*fragment:entity_head*/ and /*fragment:entity_no_older_queued*/))
    ) o
    /*fragment:take_turns*/
), follow_up as (
    select id, organization_id, integration_connection_id, created_at, false as reclaimed,
        ordered, local_entity_type, local_entity_id
    from (
        select d.*, coalesce(c.config_json -> 'ordered', 'true'::jsonb) <> 'false'::jsonb as ordered,
            row_number() over (partition by d.organization_id order by d.created_at) as turn
        from external_integration_outbox d
        left join integration_connections c
            on c.id = d.integration_connection_id and c.organization_id = d.organization_id
        where d.status = 'processing' and d.provider_status is not null
          and d.next_attempt_at <= now()
          and d.attempt_count < @max_attempts
          and (@organization_id::uuid is null or d.organization_id = @organization_id)
          and (@ids::text[] is null or d.id = any(@ids::text[]::uuid[]))
          and (coalesce(c.config_json -> 'ordered', 'true'::jsonb) = 'false'::jsonb or /*fragment:entity_free*/)
    ) o
    /*fragment:take_turns*/
), every_candidate as (
    select * from due
    union all select * from orphan
    union all select * from listed
    union all select * from expired
    union all select * from follow_up
), heads as (
    -- Of the candidates of one ordered entity only the oldest may go
    -- (entity_head lets the newer ones through): the others are
    -- behind it, and it has followers.
    select c.*, c.ordered and c.local_entity_id is not null and row_number() over e > 1 as behind,
        c.ordered and c.local_entity_id is not null and count(*) over e > 1 as followers
    from every_candidate c
    window e as (partition by c.integration_connection_id, c.local_entity_type, c.local_entity_id
                 order by c.created_at, c.id rows between unbounded preceding and unbounded following)
), candidates as (
    select * from heads where not behind
), conns as (
    -- The walk already knows the room of its pairs; only the connections
    -- of other candidates (reclaims, follow-ups, listed ids) are looked up.
    select w.org, w.conn, w.room, w.probe, false as paused from walked w
    union all
    select p.org, p.conn, e.room, e.probe, e.paused
    from (select distinct c.organization_id as org, c.integration_connection_id as conn
          from candidates c
          where c.integration_connection_id is not null
            and not exists (select 1 from walked w
                            where w.org = c.organization_id and w.conn = c.integration_connection_id)) p
    cross join lateral (/*fragment:connection_room*/) e
), ranked as (
    select c.*, coalesce(k.probe, false) as probe, coalesce(k.paused, false) as paused,
        c.integration_connection_id is null or c.conn_rank <= k.room as within
    from (
        select c.*, row_number() over (
                partition by c.organization_id, c.integration_connection_id order by c.created_at) as conn_rank
        from candidates c
    ) c
    left join conns k on k.org = c.organization_id and k.conn = c.integration_connection_id
), allowed as (
    select * from ranked where within
), picked as (
    select a.id, a.reclaimed, a.probe
    from (
        select a.*, row_number() over (partition by a.organization_id order by a.created_at) as org_rank
        from allowed a
    ) a
    order by a.org_rank, a.organization_id <= @after_organization::uuid, a.organization_id, a.created_at
    limit (select room from budget)
), locked as (
    -- The picked rows, locked (a row another transaction holds is skipped)
    -- and checked again on their latest version: a result recorded since
    -- this statement's snapshot leaves its row alone.
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
        updated_at = now()
    from locked
    where o.id = locked.id
    returning o.id, o.organization_id, o.integration_connection_id, o.command_type, o.claim_token,
        o.attempt_count, locked.reclaimed, locked.probe, o.created_at
), held as (
    select ((select room from budget) < @claim_limit::int
            and (select count(*) from picked) >= (select room from budget))
        or coalesce((select bool_or(held) from walk), false)
        or exists (select 1 from ranked where not within and not probe and not paused) as held,
        exists (select 1 from external_integration_outbox h
                where h.id = any(@heads::text[]::uuid[])
                  and h.status = 'processing' and h.provider_status is null and h.lease_expires_at > now()) as held_behind
)
select c.id::text, c.organization_id::text, coalesce(c.integration_connection_id::text, ''),
    coalesce(c.command_type, ''), c.claim_token::text, c.attempt_count, c.reclaimed, c.probe, c.created_at,
    coalesce(f.followers, false) as followers,
    h.held, h.held_behind
from held h
left join claimed c on true
left join heads f on f.id = c.id
