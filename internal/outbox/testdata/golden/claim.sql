
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
    cross join lateral (
    select k.room, k.probe, k.ordered, k.room > 0 and k.due as ok, k.capped and k.due as held
    from (
        select r.room, r.probe, r.ordered, r.capped, not r.open and exists (
                select 1 from external_integration_outbox d
                where d.organization_id = p.org and d.integration_connection_id = p.conn
                  and d.status in ('queued', 'failed')
                  and coalesce(d.next_attempt_at, now()) <= now()
                  and d.attempt_count < @max_attempts
                  and (not r.ordered or not exists (
        select 1 from external_integration_outbox x
        where x.integration_connection_id = d.integration_connection_id
          and x.local_entity_id = d.local_entity_id
          and x.local_entity_type is not distinct from d.local_entity_type
          and x.status in ('queued', 'failed', 'processing')
          and x.id <> d.id
          and ((x.status = 'processing' and (x.provider_status is not null or not x.lease_expires_at < now()
                                             or x.lease_expires_at is null))
               or x.created_at < d.created_at or (x.created_at = d.created_at and x.id < d.id))))) as due
        from (
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
    left join integration_outbox_connection_health h on h.connection_id = p.conn and @circuit_on::bool) r
    ) k) e
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
    cross join lateral (
    select k.room, k.probe, k.ordered, k.room > 0 and k.due as ok, k.capped and k.due as held
    from (
        select r.room, r.probe, r.ordered, r.capped, not r.open and exists (
                select 1 from external_integration_outbox d
                where d.organization_id = p.org and d.integration_connection_id = p.conn
                  and d.status in ('queued', 'failed')
                  and coalesce(d.next_attempt_at, now()) <= now()
                  and d.attempt_count < @max_attempts
                  and (not r.ordered or not exists (
        select 1 from external_integration_outbox x
        where x.integration_connection_id = d.integration_connection_id
          and x.local_entity_id = d.local_entity_id
          and x.local_entity_type is not distinct from d.local_entity_type
          and x.status in ('queued', 'failed', 'processing')
          and x.id <> d.id
          and ((x.status = 'processing' and (x.provider_status is not null or not x.lease_expires_at < now()
                                             or x.lease_expires_at is null))
               or x.created_at < d.created_at or (x.created_at = d.created_at and x.id < d.id))))) as due
        from (
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
    left join integration_outbox_connection_health h on h.connection_id = p.conn and @circuit_on::bool) r
    ) k) e
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
          and (not w.ordered or not exists (
        select 1 from external_integration_outbox x
        where x.integration_connection_id = d.integration_connection_id
          and x.local_entity_id = d.local_entity_id
          and x.local_entity_type is not distinct from d.local_entity_type
          and x.status in ('queued', 'failed', 'processing')
          and x.id <> d.id
          and ((x.status = 'processing' and (x.provider_status is not null or not x.lease_expires_at < now()
                                             or x.lease_expires_at is null))
               or x.created_at < d.created_at or (x.created_at = d.created_at and x.id < d.id))))
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
    order by turn, organization_id <= @after_organization::uuid, organization_id, created_at
    limit (select room from budget)
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
      and (coalesce(c.config_json -> 'ordered', 'true'::jsonb) = 'false'::jsonb or not exists (
        select 1 from external_integration_outbox x
        where x.integration_connection_id = d.integration_connection_id
          and x.local_entity_id = d.local_entity_id
          and x.local_entity_type is not distinct from d.local_entity_type
          and x.status in ('queued', 'failed', 'processing')
          and x.id <> d.id
          and ((x.status = 'processing' and (x.provider_status is not null or not x.lease_expires_at < now()
                                             or x.lease_expires_at is null))
               or x.created_at < d.created_at or (x.created_at = d.created_at and x.id < d.id))))
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
          and (coalesce(c.config_json -> 'ordered', 'true'::jsonb) = 'false'::jsonb or not exists (
        select 1 from external_integration_outbox x
        where x.integration_connection_id = d.integration_connection_id
          and x.local_entity_id = d.local_entity_id
          and x.local_entity_type is not distinct from d.local_entity_type
          and x.status in ('queued', 'failed', 'processing')
          and x.id <> d.id
          and ((x.status = 'processing' and (x.provider_status is not null or not x.lease_expires_at < now()
                                             or x.lease_expires_at is null))
               or x.created_at < d.created_at or (x.created_at = d.created_at and x.id < d.id))))
    ) o
    order by turn, organization_id <= @after_organization::uuid, organization_id, created_at
    limit (select room from budget)
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
          and (coalesce(c.config_json -> 'ordered', 'true'::jsonb) = 'false'::jsonb or not exists (
        select 1 from external_integration_outbox x
        where x.integration_connection_id = d.integration_connection_id
          and x.local_entity_id = d.local_entity_id
          and x.local_entity_type is not distinct from d.local_entity_type
          and x.status = 'processing'
          and x.id <> d.id
          and (x.provider_status is not null or not x.lease_expires_at < now() or x.lease_expires_at is null)))
    ) o
    order by turn, organization_id <= @after_organization::uuid, organization_id, created_at
    limit (select room from budget)
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
    cross join lateral (
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
    left join integration_outbox_connection_health h on h.connection_id = p.conn and @circuit_on::bool) e
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
left join claimed c on true