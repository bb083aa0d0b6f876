package outbox

// Every statement on the outbox aggregate lives here. Each is scoped by
// organization_id, and every write that follows a claim is fenced by the
// claim_token the claim handed out.

// claimSQL claims up to @claim_limit rows, within the in-flight limits,
// organizations interleaved in one rotation: every organization with a
// claimable row gets a turn before any gets a second one, oldest first
// within each. Candidates: due rows of the claimable states; rows whose lease
// expired before the provider accepted them (crash recovery); rows the
// provider accepted whose follow-up is due (pushed again with the same
// idempotency key, so the provider can say it is done); and due rows without
// a connection. Every kind takes its turn in the same rotation: the order of
// organizations starts after @after_organization (the dispatcher moves it on
// after each claim) and wraps around.
//
// The due rows come from a skip scan over the (organization, connection)
// pairs of the claim walk index, in rotation order; it stops once it has as
// many organizations with a claimable row as the claim may take, so a claim
// costs O(batch) index probes however many rows and tenants wait.
//
// Limits: at most @max_in_flight leased rows across all organizations (0:
// none), at most the connection's config_json.maxInFlight, else
// @connection_max_in_flight (0: none), leased rows per connection. With the
// circuit breaker on (@circuit_on): no row of a connection whose circuit is
// open, and one probe row at a time (none other in flight) once its cooldown
// is over; with it off, no circuit state is read and every circuit is reset.
//
// Per-entity order: on a connection whose config_json.ordered is not false,
// a row is claimed only when no other row of its (connection, entity type,
// entity) is in flight (processing, accepted rows included) and none older
// waits (queued, failed): one at a time, oldest created_at first.
//
// @max_attempts: MAX_ATTEMPTS; @lease_seconds: the lease; @organization_id:
// an optional organization; @ids: an optional id list (a rerun's
// dispatchNow). Its arguments are named (pgx.NamedArgs).
//
// Callers serialize claims (claimLockSQL): each counts what is in flight and
// which entities are busy, which two claims at once would both miss.
//
// Each claimed row comes back with held, which says whether an in-flight cap
// (global or a connection's) held due rows back: rows in flight free that
// room, so the dispatcher may wait for it. Rows held by the breaker or by
// per-entity order do not count. With no row claimed one row comes back,
// its claim columns null.
const claimSQL = `
with recursive budget as (
    select case when @max_in_flight::int > 0 then greatest(0, least(@claim_limit::int, @max_in_flight::int - (
            select count(*) from (
                select 1 from external_integration_outbox
                where status = 'processing' and provider_status is null and lease_expires_at > now()
                limit @max_in_flight::int) leased)::int))
        else @claim_limit::int end as room
), circuit_reset as (
    delete from integration_outbox_connection_health where not @circuit_on::bool
), walk(org, conn, lap, room, probe, ordered, ok, held, org_ok, found) as (
    select p.org, p.conn, p.lap, e.room, e.probe, e.ordered, e.ok, e.held, e.ok, e.ok::int
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
    cross join lateral (` + pairEligibility + `) e
    where @ids::text[] is null and (select room from budget) > 0
  union all
    select p.org, p.conn, p.lap, e.room, e.probe, e.ordered, e.ok, e.held,
        e.ok or (p.org = w.org and w.org_ok),
        w.found + case when e.ok and not (p.org = w.org and w.org_ok) then 1 else 0 end
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
    cross join lateral (` + pairEligibility + `) e
    where w.found < (select room from budget) and (p.lap = 0 or p.org <= @after_organization::uuid)
), walked as (
    select * from walk where ok
), due as (
    select d.id, d.organization_id, d.integration_connection_id, d.created_at, false as reclaimed, true as walked
    from walked w
    cross join lateral (
        select d.id, d.organization_id, d.integration_connection_id, d.created_at
        from external_integration_outbox d
        where d.organization_id = w.org and d.integration_connection_id = w.conn
          and d.status in ('queued', 'failed')
          and coalesce(d.next_attempt_at, now()) <= now()
          and d.attempt_count < @max_attempts
          and (not w.ordered or ` + entityHead + `)
        order by d.created_at
        -- Enough for this organization to fill the batch if the others
        -- have one row each.
        -- One more than the room shows a pair the limit holds back.
        limit least(w.room + 1, greatest((select room from budget) - (select count(distinct org) from walked)::int + 1, 1))
        for update skip locked
    ) d
), orphan as (
    select id, organization_id, integration_connection_id, created_at, false as reclaimed, false as walked
    from (
        select o.*, row_number() over (partition by o.organization_id order by o.created_at) as turn
        from external_integration_outbox o
        where o.status in ('queued', 'failed') and o.integration_connection_id is null
          and coalesce(o.next_attempt_at, now()) <= now()
          and o.attempt_count < @max_attempts
          and (@organization_id::uuid is null or o.organization_id = @organization_id)
          and @ids::text[] is null
    ) o
    ` + takeTurns + `
), listed as (
    select d.id, d.organization_id, d.integration_connection_id, d.created_at, false as reclaimed, false as walked
    from external_integration_outbox d
    left join integration_connections c
        on c.id = d.integration_connection_id and c.organization_id = d.organization_id
    where @ids::text[] is not null and d.id = any(@ids::text[]::uuid[])
      and d.status in ('queued', 'failed')
      and coalesce(d.next_attempt_at, now()) <= now()
      and d.attempt_count < @max_attempts
      and (@organization_id::uuid is null or d.organization_id = @organization_id)
      and (coalesce(c.config_json -> 'ordered', 'true'::jsonb) = 'false'::jsonb or ` + entityHead + `)
    order by d.created_at
    limit (select room from budget)
), expired as (
    select id, organization_id, integration_connection_id, created_at, true as reclaimed, false as walked
    from (
        select d.*, row_number() over (partition by d.organization_id order by d.created_at) as turn
        from external_integration_outbox d
        left join integration_connections c
            on c.id = d.integration_connection_id and c.organization_id = d.organization_id
        where d.status = 'processing' and d.provider_status is null
          and d.lease_expires_at < now()
          and d.attempt_count < @max_attempts
          and (@organization_id::uuid is null or d.organization_id = @organization_id)
          and (@ids::text[] is null or d.id = any(@ids::text[]::uuid[]))
          and (coalesce(c.config_json -> 'ordered', 'true'::jsonb) = 'false'::jsonb or ` + entityHead + `)
    ) o
    ` + takeTurns + `
), follow_up as (
    select id, organization_id, integration_connection_id, created_at, false as reclaimed, false as walked
    from (
        select d.*, row_number() over (partition by d.organization_id order by d.created_at) as turn
        from external_integration_outbox d
        left join integration_connections c
            on c.id = d.integration_connection_id and c.organization_id = d.organization_id
        where d.status = 'processing' and d.provider_status is not null
          and d.next_attempt_at <= now()
          and d.attempt_count < @max_attempts
          and (@organization_id::uuid is null or d.organization_id = @organization_id)
          and (@ids::text[] is null or d.id = any(@ids::text[]::uuid[]))
          and (coalesce(c.config_json -> 'ordered', 'true'::jsonb) = 'false'::jsonb or ` + entityFree + `)
    ) o
    ` + takeTurns + `
), candidates as (
    select * from due
    union all select * from orphan
    union all select * from listed
    union all select * from expired
    union all select * from follow_up
), conns as (
    -- The walk already knows the room of its pairs; only the connections
    -- of other candidates (reclaims, follow-ups, listed ids) are looked up.
    select w.org, w.conn, w.room, w.probe from walked w
    union all
    select p.org, p.conn, e.room, e.probe
    from (select distinct c.organization_id as org, c.integration_connection_id as conn
          from candidates c
          where c.integration_connection_id is not null
            and not exists (select 1 from walked w
                            where w.org = c.organization_id and w.conn = c.integration_connection_id)) p
    cross join lateral (` + connectionRoom + `) e
), ranked as (
    select c.*, coalesce(k.probe, false) as probe,
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
    select a.id, a.reclaimed, a.probe, a.walked
    from (
        select a.*, row_number() over (partition by a.organization_id order by a.created_at) as org_rank
        from allowed a
    ) a
    order by a.org_rank, a.organization_id <= @after_organization::uuid, a.organization_id, a.created_at
    limit (select room from budget)
), locked as (
    -- The picked rows of the other kinds (the walk's due rows are locked
    -- as it reads them), locked (a row another transaction holds is
    -- skipped) and checked again on their latest version: a result recorded
    -- since this statement's snapshot leaves its row alone.
    select o.id, p.reclaimed, p.probe
    from picked p
    join external_integration_outbox o on o.id = p.id
    where not p.walked and o.attempt_count < @max_attempts
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
    from (select id, reclaimed, probe from picked where walked
          union all select id, reclaimed, probe from locked) locked
    where o.id = locked.id
    returning o.id, o.organization_id, o.integration_connection_id, o.command_type, o.claim_token,
        o.attempt_count, locked.reclaimed, locked.probe, o.created_at
), held as (
    select ((select room from budget) < @claim_limit::int
            and (select count(*) from picked) >= (select room from budget))
        or coalesce((select bool_or(held) from walk), false)
        or exists (select 1 from ranked where not within and not probe) as held
)
select c.id::text, c.organization_id::text, coalesce(c.integration_connection_id::text, ''),
    coalesce(c.command_type, ''), c.claim_token::text, c.attempt_count, c.reclaimed, c.probe, c.created_at,
    h.held
from held h
left join claimed c on true`

// takeTurns ends the candidates found outside the walk (rows without a
// connection, expired leases, due follow-ups; each numbered by its turn
// within its organization): at most the room, a turn of every organization
// in rotation order (after @after_organization, wrapping around) before
// any organization's next turn.
const takeTurns = `order by turn, organization_id <= @after_organization::uuid, organization_id, created_at
    limit (select room from budget)`

// entityHead says whether the outbox row d may go now under per-entity
// order: no other command of its connection and entity is in flight
// (processing under a live lease, or accepted and awaiting its follow-up),
// and none older waits (queued, failed, or processing with an expired lease:
// reclaimable). It reads the entity index.
const entityHead = `not exists (
        select 1 from external_integration_outbox x
        where x.integration_connection_id = d.integration_connection_id
          and x.local_entity_id = d.local_entity_id
          and x.local_entity_type is not distinct from d.local_entity_type
          and x.status in ('queued', 'failed', 'processing')
          and x.id <> d.id
          and ((x.status = 'processing' and (x.provider_status is not null or not x.lease_expires_at < now()
                                             or x.lease_expires_at is null))
               or x.created_at < d.created_at or (x.created_at = d.created_at and x.id < d.id)))`

// entityFree says whether no other command of the outbox row d's connection
// and entity is in flight: what an accepted row's follow-up needs (it is in
// flight itself, so older commands requeued since wait behind it).
const entityFree = `not exists (
        select 1 from external_integration_outbox x
        where x.integration_connection_id = d.integration_connection_id
          and x.local_entity_id = d.local_entity_id
          and x.local_entity_type is not distinct from d.local_entity_type
          and x.status = 'processing'
          and x.id <> d.id
          and (x.provider_status is not null or not x.lease_expires_at < now() or x.lease_expires_at is null))`

// connectionRoom is how many more rows of the connection p.conn (of the
// organization p.org) a claim may lease: with the breaker on, none while its
// circuit is open and one probe, when nothing else of it is in flight, once
// the cooldown is over; else its in-flight limit (config_json.maxInFlight, a
// positive number, else @connection_max_in_flight; none when both are unset)
// minus its leased rows. probe says the row would be the half-open circuit's
// probe; capped that the in-flight limit is what leaves no room; ordered
// that the connection keeps per-entity order (config_json.ordered is not
// false).
const connectionRoom = `
    select coalesce(h.open_until > now(), false) as open,
        h.open_until is not null as probe,
        case when h.open_until > now() then 0
             when h.open_until is not null then case when f.n = 0 then 1 else 0 end
             when cap.n is null then 1000000
             else greatest(cap.n - f.n, 0) end as room,
        h.open_until is null and cap.n is not null and f.n >= cap.n as capped,
        cap.ordered
    from (select coalesce(cc.n, nullif(@connection_max_in_flight::int, 0)) as n, coalesce(cc.ordered, true) as ordered
          from (select 1) one
          left join lateral (
            select case when jsonb_typeof(c.config_json -> 'maxInFlight') = 'number'
                         and (c.config_json ->> 'maxInFlight')::numeric >= 1
                    then least(floor((c.config_json ->> 'maxInFlight')::numeric), 1000000)::int end as n,
                coalesce(c.config_json -> 'ordered', 'true'::jsonb) <> 'false'::jsonb as ordered
            from integration_connections c
            where c.id = p.conn and c.organization_id = p.org) cc on true) cap
    cross join lateral (
        select count(*)::int as n from (
            select 1 from external_integration_outbox l
            where l.integration_connection_id = p.conn
              and l.status = 'processing' and l.provider_status is null and l.lease_expires_at > now()
            limit coalesce(cap.n, 1)) leased
    ) f
    left join integration_outbox_connection_health h on h.connection_id = p.conn and @circuit_on::bool`

// pairEligibility says whether the walk's pair p (organization p.org,
// connection p.conn) has a row the claim may take (ok), or due rows that an
// in-flight limit holds back (held). A pair whose circuit is open costs no
// look at its rows.
const pairEligibility = `
    select k.room, k.probe, k.ordered, k.room > 0 and k.due as ok, k.capped and k.due as held
    from (
        select r.room, r.probe, r.ordered, r.capped, not r.open and exists (
                select 1 from external_integration_outbox d
                where d.organization_id = p.org and d.integration_connection_id = p.conn
                  and d.status in ('queued', 'failed')
                  and coalesce(d.next_attempt_at, now()) <= now()
                  and d.attempt_count < @max_attempts
                  and (not r.ordered or ` + entityHead + `)) as due
        from (` + connectionRoom + `) r
    ) k`

// deadLetterExpiredSQL ends the rows that have no attempt left, with their
// one open conflict (provider_rejected: attempts exhausted): rows whose
// lease expired after their last attempt, accepted rows whose follow-up is
// due, and due queued or failed rows at or past $1 (MAX_ATTEMPTS was lowered
// below what they have used; no claim would ever take them). $1
// MAX_ATTEMPTS, $2 optional organization, $3 optional id list (the same
// scope as the claim).
const deadLetterExpiredSQL = `
with exhausted as (
    select o.id from external_integration_outbox o
    where o.status = 'processing' and o.provider_status is null and o.lease_expires_at < now()
      and o.attempt_count >= $1
      and ($2::uuid is null or o.organization_id = $2)
      and ($3::text[] is null or o.id = any($3::text[]::uuid[]))
    union all
    select o.id from external_integration_outbox o
    where o.status = 'processing' and o.provider_status is not null and o.next_attempt_at <= now()
      and o.attempt_count >= $1
      and ($2::uuid is null or o.organization_id = $2)
      and ($3::text[] is null or o.id = any($3::text[]::uuid[]))
    union all
    select o.id from external_integration_outbox o
    where o.status in ('queued', 'failed') and coalesce(o.next_attempt_at, now()) <= now()
      and o.attempt_count >= $1
      and ($2::uuid is null or o.organization_id = $2)
      and ($3::text[] is null or o.id = any($3::text[]::uuid[]))
), expired as (
    update external_integration_outbox o
    set status = 'dead_letter',
        last_error = left(case
                when o.status in ('queued', 'failed')
                then 'attempts exhausted: ' || o.attempt_count || ' attempts made, MAX_ATTEMPTS is ' || $1
                when o.provider_status is null
                then 'attempts exhausted: the lease of the last attempt expired without a recorded result'
                else 'attempts exhausted: the provider answered ' || o.provider_status || ' but never confirmed completion'
            end || coalesce('; previous error: ' || o.last_error, ''), 1000),
        lease_expires_at = null,
        next_attempt_at = null,
        updated_at = now()
    from exhausted x
    where o.id = x.id and o.attempt_count >= $1
      and ((o.status = 'processing' and o.provider_status is null and o.lease_expires_at < now())
        or (o.status = 'processing' and o.provider_status is not null and o.next_attempt_at <= now())
        or (o.status in ('queued', 'failed') and coalesce(o.next_attempt_at, now()) <= now()))
    returning o.*
), conflicts as (
    insert into external_integration_conflicts (organization_id, location_id, integration_connection_id,
        conflict_type, severity, local_entity_type, local_entity_id, summary, local_snapshot, outbox_id)
    select e.organization_id, c.location_id, e.integration_connection_id,
        'provider_rejected', 'high', e.local_entity_type, e.local_entity_id,
        'External provider outbound command reached dead letter: attempts exhausted.',
        jsonb_build_object('outboxId', e.id, 'commandType', e.command_type,
            'idempotencyKey', e.idempotency_key, 'lastError', e.last_error),
        e.id
    from expired e
    left join integration_connections c
        on c.id = e.integration_connection_id and c.organization_id = e.organization_id
    on conflict (outbox_id) where status = 'open' and outbox_id is not null do nothing
)
select count(*) from expired`

// releaseSQL puts claimed rows whose message could not be sent back at once:
// due now, the attempt not consumed, the claim dropped.
const releaseSQL = `
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
  and o.claim_token = r.claim_token and o.status = 'processing' and o.started_at is null`

// unsupportedSQL ends claimed rows nobody can deliver ($5 says why).
const unsupportedSQL = `
update external_integration_outbox o
set status = 'unsupported',
    completed_at = now(),
    last_error = $5,
    lease_expires_at = null,
    updated_at = now()
from unnest($1::text[]::uuid[], $2::text[]::uuid[], $3::text[]::uuid[], $4::text[]::uuid[]) as r(id, organization_id, claim_token, connection_id)
where o.id = r.id and o.organization_id = r.organization_id
  and o.integration_connection_id is not distinct from r.connection_id
  and o.claim_token = r.claim_token and o.status = 'processing'`

// noConnectionSQL ends claimed rows that have no integration connection:
// nothing can deliver them and no attempt would change that, so they go to
// dead_letter at once with the attempt given back and their one open
// configuration_invalid conflict. Fenced like releaseSQL.
const noConnectionSQL = `
with ended as (
    update external_integration_outbox o
    set status = 'dead_letter',
        attempt_count = greatest(o.attempt_count - 1, 0),
        last_error = 'integration_connection_id: missing: the command names no integration connection',
        lease_expires_at = null,
        next_attempt_at = null,
        updated_at = now()
    from unnest($1::text[]::uuid[], $2::text[]::uuid[], $3::text[]::uuid[]) as r(id, organization_id, claim_token)
    where o.id = r.id and o.organization_id = r.organization_id
      and o.integration_connection_id is null
      and o.claim_token = r.claim_token and o.status = 'processing' and o.started_at is null
    returning o.*
), conflicts as (
    insert into external_integration_conflicts (organization_id, location_id, integration_connection_id,
        conflict_type, severity, local_entity_type, local_entity_id, summary, local_snapshot, outbox_id)
    select e.organization_id, null::uuid, null::uuid,
        'configuration_invalid', 'high', e.local_entity_type, e.local_entity_id,
        'External provider outbound command reached dead letter (configuration_invalid): ' || e.last_error,
        jsonb_build_object('outboxId', e.id, 'commandType', e.command_type,
            'idempotencyKey', e.idempotency_key, 'lastError', e.last_error),
        e.id
    from ended e
    on conflict (outbox_id) where status = 'open' and outbox_id is not null do nothing
)
select count(*) from ended`

// startSQL consumes claims: one atomic update marks each job started for its
// token (a stale token, an already started claim or a lease that has expired
// matches nothing: the next dispatch may already be reclaiming that row) and
// extends its lease to $5, the end of the push, so that no reclaim takes a
// job that is mid-call (a null $5 keeps the lease as it is). The
// same statement loads the job's connection, organization scoped. The
// entity a command acts on is not the outbox's business: each command
// loads its own, in its own package.
const startSQL = `
with req as (
    select * from unnest($1::text[]::uuid[], $2::text[]::uuid[], $3::text[]::uuid[], $4::text[]::uuid[], $5::timestamptz[])
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
    coalesce(s.payload_json, '{}'::jsonb), coalesce(s.idempotency_key, s.id::text),
    s.attempt_count, s.claim_token::text,
    c.id is not null, coalesce(c.location_id::text, ''), coalesce(c.provider, ''),
    coalesce(c.credential_reference, ''), coalesce(c.config_json, '{}'::jsonb)
from started s
left join integration_connections c
    on c.id = s.integration_connection_id and c.organization_id = s.organization_id`

// recordSQL records the results of started jobs, fenced by their claim token,
// opens one conflict per row that reached dead_letter, and appends one
// attempt-history row per recorded result (a stale token records neither):
// the history costs no statement of its own. Its circuit CTEs feed the
// connections' circuit breakers from the recorded results
// (@circuit_signals: a provider call's "success" or retryable "failure", or
// null; @failure_threshold: CIRCUIT_FAILURE_THRESHOLD, 0: off;
// @cooldown_seconds: CIRCUIT_COOLDOWN): see circuitSQL. Its arguments are
// named (pgx.NamedArgs): one array per outcome field. It returns the recorded ids, then one row per circuit that
// changed state (a null id).
const recordSQL = `
with res as (
    select * from unnest(@ids::text[]::uuid[], @organization_ids::text[]::uuid[], @claim_tokens::text[]::uuid[],
        @statuses::text[], @provider_references::text[], @provider_statuses::text[],
        @last_errors::text[], @retry_seconds::float8[], @conflict_types::text[], @conflict_summaries::text[],
        @location_ids::text[]::uuid[], @connection_ids::text[]::uuid[],
        @call_started_at::timestamptz[], @call_finished_at::timestamptz[], @provider_called::bool[],
        @http_statuses::int[])
        as r(id, organization_id, claim_token, status, provider_reference, provider_status,
            last_error, retry_seconds, conflict_type, conflict_summary, location_id, connection_id,
            started_at, finished_at, provider_called, http_status)
), updated as (
    update external_integration_outbox o
    set status = res.status,
        provider_reference = coalesce(res.provider_reference, o.provider_reference),
        provider_status = coalesce(res.provider_status, o.provider_status),
        last_error = coalesce(res.last_error, o.last_error),
        next_attempt_at = case when res.status in ('failed', 'processing')
            then now() + make_interval(secs => res.retry_seconds) end,
        completed_at = case when res.status in ('completed', 'unsupported') then now() else o.completed_at end,
        lease_expires_at = null,
        updated_at = now()
    from res
    where o.id = res.id and o.organization_id = res.organization_id
      and o.integration_connection_id is not distinct from res.connection_id
      and o.claim_token = res.claim_token
      and o.status = 'processing' and o.started_at is not null
      -- Recording ends the lease: a repeat of the same record (its commit
      -- acknowledgement lost) matches nothing and writes no second attempt.
      and o.lease_expires_at is not null
    returning o.id, o.organization_id, o.integration_connection_id, o.command_type,
        o.local_entity_type, o.local_entity_id, o.idempotency_key, o.status, o.last_error,
        o.attempt_count, o.started_at,
        res.conflict_type, res.conflict_summary, res.location_id, res.provider_reference, res.provider_status,
        res.last_error as attempt_error, res.started_at as call_started_at, res.finished_at,
        res.provider_called, res.http_status
), conflicts as (
    insert into external_integration_conflicts (organization_id, location_id, integration_connection_id,
        conflict_type, severity, local_entity_type, local_entity_id, summary, local_snapshot, outbox_id)
    select u.organization_id, u.location_id, u.integration_connection_id,
        u.conflict_type, 'high', u.local_entity_type, u.local_entity_id, u.conflict_summary,
        jsonb_build_object('outboxId', u.id, 'commandType', u.command_type,
            'idempotencyKey', u.idempotency_key, 'lastError', u.last_error),
        u.id
    from updated u
    where u.status = 'dead_letter'
    on conflict (outbox_id) where status = 'open' and outbox_id is not null do nothing
), attempts as (
    insert into external_integration_attempts (outbox_id, organization_id, attempt, started_at, finished_at,
        outcome, provider_called, http_status, error_excerpt, provider_reference, provider_status)
    select u.id, u.organization_id, u.attempt_count, coalesce(u.call_started_at, u.started_at),
        coalesce(u.finished_at, now()), u.status, coalesce(u.provider_called, false), u.http_status,
        left(u.attempt_error, 1000), u.provider_reference, u.provider_status
    from updated u
)` + circuitSQL + `
select id::text, null, null, null from updated
union all
select null, connection_id::text, transition, open_until from circuit_changes`

// circuitSQL is recordSQL's circuit breaker part: per connection, a recorded
// success closes its circuit; retryable failures add to its consecutive
// failures, and open the circuit for @cooldown_seconds once they reach
// @failure_threshold. A failure once the cooldown is over (the probe's) opens it again for twice
// the previous cooldown, at most an hour. A success where nothing failed
// writes nothing. Rows are locked in connection order (no deadlock between
// concurrent batches).
const circuitSQL = `, circuit_signals as (
    select u.organization_id, u.integration_connection_id as connection_id,
        count(*) filter (where r.circuit = 'failure') as failures,
        bool_or(r.circuit = 'success') as succeeded
    from updated u
    join unnest(@ids::text[]::uuid[], @circuit_signals::text[]) as r(id, circuit) on r.id = u.id
    where @failure_threshold::int > 0 and u.integration_connection_id is not null and r.circuit is not null
    group by u.organization_id, u.integration_connection_id
), circuit_before as (
    select h.connection_id, h.open_until
    from integration_outbox_connection_health h
    where h.connection_id in (select connection_id from circuit_signals)
), circuit_after as (
    insert into integration_outbox_connection_health as h (connection_id, organization_id,
        consecutive_failures, opened_count, open_until, opened_at, updated_at)
    select s.connection_id, s.organization_id,
        case when s.succeeded then 0 else s.failures end,
        case when not s.succeeded and s.failures >= @failure_threshold then 1 else 0 end,
        case when not s.succeeded and s.failures >= @failure_threshold then now() + make_interval(secs => @cooldown_seconds) end,
        case when not s.succeeded and s.failures >= @failure_threshold then now() end,
        now()
    from circuit_signals s
    where not s.succeeded or exists (select 1 from circuit_before b where b.connection_id = s.connection_id)
    order by s.connection_id
    on conflict (connection_id) do update
    set consecutive_failures = case when excluded.consecutive_failures = 0 then 0
            else h.consecutive_failures + excluded.consecutive_failures end,
        open_until = case
            when excluded.consecutive_failures = 0 then null
            when h.open_until is null then case
                when h.consecutive_failures + excluded.consecutive_failures >= @failure_threshold
                then now() + make_interval(secs => @cooldown_seconds) end
            when h.open_until > now() then h.open_until
            else now() + make_interval(secs => least(@cooldown_seconds * power(2, least(h.opened_count, 20)), greatest(@cooldown_seconds, 3600)))
        end,
        opened_count = case
            when excluded.consecutive_failures = 0 then 0
            when h.open_until is null then case
                when h.consecutive_failures + excluded.consecutive_failures >= @failure_threshold then 1 else 0 end
            when h.open_until > now() then h.opened_count
            else h.opened_count + 1
        end,
        opened_at = case
            when excluded.consecutive_failures = 0 then null
            when h.open_until is null or h.open_until <= now() then case
                when h.open_until is not null or h.consecutive_failures + excluded.consecutive_failures >= @failure_threshold
                then now() else h.opened_at end
            else h.opened_at
        end,
        updated_at = now()
    where excluded.consecutive_failures > 0 or h.consecutive_failures > 0 or h.open_until is not null
    returning h.connection_id, h.open_until
), circuit_changes as (
    select a.connection_id, a.open_until,
        case when a.open_until is null then 'closed'
             when b.open_until is null then 'opened'
             else 'reopened' end as transition
    from circuit_after a
    left join circuit_before b on b.connection_id = a.connection_id
    where (a.open_until is null) <> (b.open_until is null)
       or (b.open_until <= now() and a.open_until > now())
)`
