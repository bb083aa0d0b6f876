-- The scheduled claim: up to @claim_limit rows within the in-flight limits,
-- organizations interleaved in one rotation (every organization with a
-- claimable row gets a turn before any gets a second one, oldest first
-- within each), starting after @after_organization (the dispatcher moves it
-- on after each claim) and wrapping around; only @organization_id's rows
-- when it is set. It reads top to bottom:
--
-- 1. candidates: the walk's due rows (queued or failed, due, attempts left),
--    then the rows it does not bring: due rows without a connection,
--    expired leases (crash recovery: reclaimed) and accepted rows whose
--    follow-up is due (pushed again with the same idempotency key);
-- 2. followers parked (park_* and parked): the due queued rows per-entity
--    order held back ahead of a walked pair's first claimable row leave the
--    walk index, each naming the command it waits for (see park_pairs);
-- 3. heads, room, pick, lock and update: fragment/take.sql.
--
-- The walk is a skip scan over the (organization, connection) pairs of the
-- walk index (walk_unparked_idx) in rotation order. Each step finds the next pair,
-- its room (fragment/connection_room.sql) and, when it has room, its first
-- claimable row; it stops once it has as many organizations with a
-- claimable row as the claim may take, so a claim costs O(batch) index
-- probes however many rows and tenants wait, plus, in a walked pair, a row
-- read and an entity_head probe for each due row that per-entity order
-- holds back ahead of the pair's first claimable one (the walk index does
-- not hold the entity).
--
-- A walked pair then reads its next rows up to its organization's share of
-- the claim (the claim's room over the organizations walked), and beyond it
-- only where other organizations have fewer rows than their share: one
-- row more than the connection's room shows a pair its in-flight limit
-- holds back.
--
-- Per-entity order: on a connection whose config_json.ordered is not false,
-- a row is claimed only when no other row of its (connection, entity type,
-- entity) is in flight (processing, accepted rows included) and none older
-- waits (queued, failed): one at a time, oldest created_at first. The rows
-- the walk may pass by (failed, queued but due later, processing) are probed
-- in the entity order index (fragment/entity_head.sql); a queued row due
-- from the start, which the host's inserts keep out of every index but the
-- walk's, is met by the walk before any newer command of its entity, so of
-- the candidates of one entity only the oldest goes (heads, in
-- fragment/take.sql). Reclaims also probe the walk index for older queued
-- and failed rows (fragment/entity_no_older_queued.sql). An accepted row's
-- follow-up waits only for a row under a live lease or an older accepted
-- one (fragment/entity_free.sql): of two accepted rows of an entity the
-- older goes first.
--
-- @max_attempts: MAX_ATTEMPTS; @lease_seconds: the lease; @heads: the run's
-- claimed rows that had followers, @awaited: those others may wait for (see
-- fragment/take.sql); the caps:
-- fragment/budget.sql and fragment/connection_room.sql.
--
-- Callers serialize claims (claim_setup.sql: an advisory lock): each counts
-- what is in flight and which entities are busy, which two claims at once
-- would both miss.

with recursive budget as (
/*fragment:budget*/ select 0 as room /*end:budget*/
), halts as (
/*fragment:halts*/ select '{}'::uuid[] as open, '{}'::uuid[] as half_open, '{}'::uuid[] as stopped /*end:halts*/
), scope as (
    -- The organizations the claim serves, as a range of the walk index:
    -- one (@organization_id) or all.
    select coalesce(@organization_id::uuid, '00000000-0000-0000-0000-000000000000') as first_org,
        coalesce(@organization_id::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff') as last_org
), walk(org, conn, lap, found, org_ok, ok, held, room, probe, ordered, opened,
        id, created_at, local_entity_type, local_entity_id) as (
    -- Where the rotation starts: no pair yet.
    select @after_organization::uuid, null::uuid, 0, 0, false, false, false, 0, false, false, false,
        null::uuid, null::timestamptz, null::text, null::uuid
  union all
    -- found counts the organizations with a claimable row so far; org_ok
    -- says whether this step's organization already has one.
    select p.org, p.conn, p.lap, w.found + (e.ok and not (p.org = w.org and w.org_ok))::int,
        e.ok or (p.org = w.org and w.org_ok), e.ok, e.held, e.room, e.probe, e.ordered, e.opened,
        e.id, e.created_at, e.local_entity_type, e.local_entity_id
    from walk w
    cross join scope s
    cross join lateral (
        -- The next pair: the organization's next connection, else the next
        -- organization's first, else (once) the scope's first pair again.
        select * from (
            (select o.organization_id as org, o.integration_connection_id as conn, w.lap as lap
             from external_integration_outbox o
             where o.status in ('queued', 'failed') and o.integration_connection_id is not null
               and (o.waiting_for_outbox_id is null or o.status <> 'queued')
               and o.organization_id = w.org and o.integration_connection_id > w.conn
             order by o.integration_connection_id
             limit 1)
            union all
            (select o.organization_id, o.integration_connection_id, w.lap
             from external_integration_outbox o
             where o.status in ('queued', 'failed') and o.integration_connection_id is not null
               and (o.waiting_for_outbox_id is null or o.status <> 'queued')
               and o.organization_id > w.org and o.organization_id >= s.first_org and o.organization_id <= s.last_org
             order by o.organization_id, o.integration_connection_id
             limit 1)
            union all
            (select o.organization_id, o.integration_connection_id, 1
             from external_integration_outbox o
             where o.status in ('queued', 'failed') and o.integration_connection_id is not null
               and (o.waiting_for_outbox_id is null or o.status <> 'queued')
               and w.lap = 0 and o.organization_id >= s.first_org and o.organization_id <= s.last_org
             order by o.organization_id, o.integration_connection_id
             limit 1)
        ) next_pair
        limit 1
    ) p
    cross join lateral (
        -- The pair's room and its first claimable row (none is read while
        -- it has no room): ok when it has both; held when its in-flight
        -- limit holds due rows back.
        select r.room, r.probe, r.ordered, r.open as opened, r.room > 0 and f.id is not null as ok,
            r.capped and f.id is not null as held,
            f.id, f.created_at, f.local_entity_type, f.local_entity_id
        from (/*fragment:connection_room*/
              select false as open, false as probe, false as paused, 0 as room, false as capped, true as ordered
              /*end:connection_room*/) r
        left join lateral (
            select d.id, d.created_at, d.local_entity_type, d.local_entity_id
            from external_integration_outbox d
            where not r.open
              and d.organization_id = p.org and d.integration_connection_id = p.conn
              and d.status in ('queued', 'failed')
              and (d.waiting_for_outbox_id is null or d.status <> 'queued')
              and coalesce(d.next_attempt_at, now()) <= now()
              and d.attempt_count < @max_attempts
              and (not r.ordered or /*fragment:entity_head*/ true /*end:entity_head*/)
            order by d.created_at
            limit 1
        ) f on true
    ) e
    where w.found < (select room from budget) and (p.lap = 0 or p.org <= @after_organization::uuid)
), walked as (
    select * from walk where ok
), share as (
    -- Each organization's share of the claim.
    select ceil((select room from budget)::numeric / greatest(count(distinct org), 1))::int as rows
    from walked
), dealt as (
    -- Each walked pair's first claimable row and its next ones, up to its
    -- organization's share (or one more than its room).
    select w.org, w.conn, w.room, w.ordered, w.id, w.created_at, w.local_entity_type, w.local_entity_id
    from walked w
  union all
    select w.org, w.conn, w.room, w.ordered, d.id, d.created_at, d.local_entity_type, d.local_entity_id
    from walked w
    cross join lateral (
        select d.id, d.created_at, d.local_entity_type, d.local_entity_id
        from external_integration_outbox d
        where d.organization_id = w.org and d.integration_connection_id = w.conn
          and d.created_at >= w.created_at and d.id <> w.id
          and d.status in ('queued', 'failed')
          and (d.waiting_for_outbox_id is null or d.status <> 'queued')
          and coalesce(d.next_attempt_at, now()) <= now()
          and d.attempt_count < @max_attempts
          and (not w.ordered or /*fragment:entity_head*/ true /*end:entity_head*/)
        order by d.created_at
        limit least(w.room, (select rows from share) - 1)
    ) d
    -- Only the pairs with something to read (none when every organization's
    -- share is one row): also what lets the planner cost this read for fewer
    -- pairs than the walk may bring.
    where least(w.room, (select rows from share) - 1) > 0
), dealt_pairs as (
    -- What each pair brought: how many rows (n), how many of them it may
    -- take (usable: the oldest of each ordered entity, within its room),
    -- and whether it filled its share (full: it may have more).
    select d.org, d.conn, d.room, d.ordered, count(*) as n, max(d.created_at) as last_at,
        least(count(*) filter (where not d.behind), d.room) as usable,
        count(*) = least(d.room + 1, (select rows from share)) and (select rows from share) <= d.room as full
    from (
        select d.*, d.ordered and d.local_entity_id is not null
                and row_number() over (partition by d.conn, d.local_entity_type, d.local_entity_id
                                       order by d.created_at, d.id) > 1 as behind
        from dealt d
    ) d
    group by d.org, d.conn, d.room, d.ordered
), unused as (
    -- The part of the claim that organizations with fewer rows than their
    -- share leave to the others.
    select greatest((select room from budget) - sum(least(o.usable, (select rows from share))), 0)::int as rows
    from (select org, sum(usable) as usable from dealt_pairs group by org) o
), beyond as (
    -- The rows past their share of the pairs that filled it, when some of
    -- the claim is unused: as many as are unused, up to one more than the
    -- pair's room. dealt_pairs holds one row per walked pair; it is reached
    -- through walked because the planner cannot estimate an aggregate of a
    -- CTE (it assumes 200 rows, each costed as a read of all the pair's due
    -- rows: most of the claim's estimated cost on a large single-tenant
    -- outbox, bench/results.md), while walked comes from the walk's estimate.
    select g.org, g.conn, g.room, g.ordered, d.id, d.created_at, d.local_entity_type, d.local_entity_id
    from walked w
    join dealt_pairs g on g.org = w.org and g.conn = w.conn
    cross join lateral (
        select d.id, d.created_at, d.local_entity_type, d.local_entity_id
        from external_integration_outbox d
        where d.organization_id = g.org and d.integration_connection_id = g.conn
          and d.created_at >= g.last_at
          and d.status in ('queued', 'failed')
          and (d.waiting_for_outbox_id is null or d.status <> 'queued')
          and coalesce(d.next_attempt_at, now()) <= now()
          and d.attempt_count < @max_attempts
          and not exists (select 1 from dealt x where x.id = d.id)
          and (not g.ordered or /*fragment:entity_head*/ true /*end:entity_head*/)
        order by d.created_at
        limit least(g.room + 1 - g.n, (select rows from unused))
    ) d
    where g.full and (select rows from unused) > 0
), stray as (
    -- The candidates the walk does not bring, each kind taking its turns
    -- (see turns below).
    select 'orphan' as kind, o.id, o.organization_id, o.integration_connection_id, o.created_at,
        o.local_entity_type, o.local_entity_id
    from external_integration_outbox o, scope s
    where o.status in ('queued', 'failed') and o.integration_connection_id is null
      and coalesce(o.next_attempt_at, now()) <= now()
      and o.attempt_count < @max_attempts
      and o.organization_id between s.first_org and s.last_org
  union all
    select 'reclaim', o.id, o.organization_id, o.integration_connection_id, o.created_at,
        o.local_entity_type, o.local_entity_id
    from external_integration_outbox o, scope s
    where o.status = 'processing' and o.provider_status is null
      and o.lease_expires_at < now()
      and o.attempt_count < @max_attempts
      and o.organization_id between s.first_org and s.last_org
  union all
    select 'follow_up', o.id, o.organization_id, o.integration_connection_id, o.created_at,
        o.local_entity_type, o.local_entity_id
    from external_integration_outbox o, scope s
    where o.status = 'processing' and o.provider_status is not null
      and o.next_attempt_at <= now()
      and o.attempt_count < @max_attempts
      and o.organization_id between s.first_org and s.last_org
), conns as (
    -- The room of every candidate's connection: the walk knows its pairs';
    -- the others' connections are looked up.
    select w.org, w.conn, w.room, w.probe, false as paused, w.ordered from walked w
    union all
    select p.org, p.conn, e.room, e.probe, e.paused, e.ordered
    from (select distinct s.organization_id as org, s.integration_connection_id as conn
          from stray s
          where s.integration_connection_id is not null
            and not exists (select 1 from walked w
                            where w.org = s.organization_id and w.conn = s.integration_connection_id)) p
    cross join lateral (/*fragment:connection_room*/
                        select false as open, false as probe, false as paused, 0 as room, false as capped, true as ordered
                        /*end:connection_room*/) e
), turns as (
    -- The stray candidates per-entity order lets go, each kind at most the
    -- claim's room of them: a turn of every organization in rotation order
    -- (after @after_organization, wrapping around) before any
    -- organization's next turn.
    select d.*, row_number() over (
            partition by d.kind order by d.turn, d.organization_id <= @after_organization::uuid, d.organization_id, d.created_at) as place
    from (
        select d.*, coalesce(k.ordered, false) as ordered,
            row_number() over (partition by d.kind, d.organization_id order by d.created_at) as turn
        from stray d
        left join conns k on k.org = d.organization_id and k.conn = d.integration_connection_id
        where not coalesce(k.ordered, false)
           or (d.kind = 'follow_up' and /*fragment:entity_free*/ true /*end:entity_free*/)
           or (d.kind = 'reclaim' and /*fragment:entity_head*/ true /*end:entity_head*/
               and /*fragment:entity_no_older_queued*/ true /*end:entity_no_older_queued*/)
    ) d
), every_candidate as (
    select id, org as organization_id, conn as integration_connection_id, created_at, false as reclaimed,
        ordered, local_entity_type, local_entity_id
    from dealt
    union all
    select id, org, conn, created_at, false, ordered, local_entity_type, local_entity_id
    from beyond
    union all
    select id, organization_id, integration_connection_id, created_at, kind = 'reclaim', ordered,
        local_entity_type, local_entity_id
    from turns
    where place <= (select room from budget)
), pairs_held as (
    -- Whether an in-flight limit held back a walked pair with no room.
    select coalesce(bool_or(held), false) as held from walk
), park_pairs as (
    -- Followers parked: the walked pairs of an ordered connection whose
    -- oldest queued or failed row in the walk index is older than their
    -- first claimable row (or that have none): the walk read rows there
    -- that it could not take (one index probe each).
    select distinct w.org, w.conn, w.created_at as first_at
    from walk w
    cross join lateral (
        select 1 from external_integration_outbox o
        where o.organization_id = w.org and o.integration_connection_id = w.conn
          and o.status in ('queued', 'failed')
          and (o.waiting_for_outbox_id is null or o.status <> 'queued')
          -- One bound the index can seek to (an OR with "is null" would
          -- read every row of the pair): a pair without a claimable row
          -- looks at all its rows, bar those without a created_at, which
          -- are then not parked (they wait where they are, as before
          -- parking).
          and o.created_at < coalesce(w.created_at, 'infinity')
        limit 1
    ) older
    where w.conn is not null and w.ordered and not w.opened
), park_read as (
    -- Of the first 200 of those rows of each, the queued ones due that
    -- per-entity order holds back (at most 200 a claim).
    select d.id, d.organization_id, d.integration_connection_id, d.created_at,
        d.local_entity_type, d.local_entity_id
    from park_pairs w
    cross join lateral (
        select d.*
        from (
            select d.id
            from external_integration_outbox d
            where d.organization_id = w.org and d.integration_connection_id = w.conn
              and d.status in ('queued', 'failed')
              and (d.waiting_for_outbox_id is null or d.status <> 'queued')
              and d.created_at < coalesce(w.first_at, 'infinity')
            order by d.created_at
            limit 200
        ) r
        join external_integration_outbox d on d.id = r.id
        where d.status = 'queued' and d.local_entity_id is not null
          and coalesce(d.next_attempt_at, now()) <= now()
          and d.attempt_count < @max_attempts
          and not /*fragment:entity_head*/ true /*end:entity_head*/
    ) d
    limit 200
), park as (
    -- What each waits for: the row parked here just before it of its
    -- entity, else the newest older command of its entity not yet ended
    -- (in flight, failed, due later or parked: the entity order index),
    -- else the one in flight.
    select p.id, coalesce(lag(p.id) over (
            partition by p.integration_connection_id, p.local_entity_type, p.local_entity_id
            order by p.created_at, p.id),
        (select x.id from external_integration_outbox x
         where x.integration_connection_id = p.integration_connection_id
           and x.local_entity_id = p.local_entity_id
           and x.local_entity_type is not distinct from p.local_entity_type
           and (x.status in ('failed', 'processing') or (x.status = 'queued' and x.next_attempt_at > x.created_at))
           and x.id <> p.id
           and ((x.created_at < p.created_at or (x.created_at = p.created_at and x.id < p.id))
                or x.status = 'processing')
         order by (x.created_at < p.created_at or (x.created_at = p.created_at and x.id < p.id)) desc,
             x.created_at desc, x.id desc
         limit 1)) as waits_for
    from park_read p
), park_locked as (
    -- Each locked (a row another transaction holds stays as it is) and
    -- checked again on its latest version.
    select o.id, k.waits_for
    from park k
    join external_integration_outbox o on o.id = k.id
    where k.waits_for is not null and o.status = 'queued' and o.waiting_for_outbox_id is null
      and coalesce(o.next_attempt_at, now()) <= now()
    for update of o skip locked
), parked as (
    -- Parked: it names what it waits for and leaves the walk index (still
    -- queued); next_attempt_at after created_at keeps it in the entity
    -- order index, where it holds newer commands of its entity back
    -- (fragment/entity_head.sql). The end of what it waits for makes it due
    -- again (record.sql's and dead_letter_expired.sql's woken steps; the
    -- latter also wakes a row whose awaited row ended otherwise or is gone).
    update external_integration_outbox o
    set waiting_for_outbox_id = l.waits_for,
        next_attempt_at = greatest(now(), o.created_at + interval '1 millisecond'),
        updated_at = now()
    from park_locked l
    where o.id = l.id
)
/*fragment:take*/ select null::text as id, null::text as organization_id, ''::text as integration_connection_id,
    ''::text as command_type, null::text as claim_token, null::int as attempt_count, null::bool as reclaimed,
    null::bool as probe, null::timestamptz as created_at, false as followers, false as held, false as held_behind
/*end:take*/
