-- The listed claim (a rerun's dispatchNow): of the rows @ids names, of
-- @organization_id when it is set, those a claim may take now (queued or
-- failed and due; a lease that expired before the provider accepted the row:
-- reclaimed; an accepted row whose follow-up is due), within the same limits,
-- rotation and per-entity order as the scheduled claim
-- (claim_scheduled.sql): a listed row whose connection keeps per-entity
-- order goes only when nothing of its entity is in flight ahead of it and
-- no older command of it waits. Then heads, room, pick, lock and update:
-- fragment/take.sql. @heads and @awaited are always empty here: a listed
-- run never waits for a follower or a waiting row.

with budget as (
/*fragment:budget*/ select 0 as room /*end:budget*/
), halts as (
/*fragment:halts*/ select '{}'::uuid[] as open, '{}'::uuid[] as half_open, '{}'::uuid[] as stopped /*end:halts*/
), listed as (
    select d.id, d.organization_id, d.integration_connection_id, d.created_at,
        d.local_entity_type, d.local_entity_id,
        d.status = 'processing' and d.provider_status is null as reclaimed,
        d.status = 'processing' and d.provider_status is not null as follow_up
    from external_integration_outbox d
    where d.id = any(@ids::text[]::uuid[])
      and (@organization_id::uuid is null or d.organization_id = @organization_id)
      and d.attempt_count < @max_attempts
      and ((d.status in ('queued', 'failed') and coalesce(d.next_attempt_at, now()) <= now())
        or (d.status = 'processing' and d.provider_status is null and d.lease_expires_at < now())
        or (d.status = 'processing' and d.provider_status is not null and d.next_attempt_at <= now()))
), conns as (
    select p.org, p.conn, e.room, e.probe, e.paused, e.ordered
    from (select distinct organization_id as org, integration_connection_id as conn
          from listed where integration_connection_id is not null) p
    cross join lateral (/*fragment:connection_room*/
                        select false as open, false as probe, false as paused, 0 as room, false as capped, true as ordered
                        /*end:connection_room*/) e
), every_candidate as (
    select d.id, d.organization_id, d.integration_connection_id, d.created_at, d.reclaimed,
        coalesce(k.ordered, false) as ordered, d.local_entity_type, d.local_entity_id
    from listed d
    left join conns k on k.org = d.organization_id and k.conn = d.integration_connection_id
    where not coalesce(k.ordered, false)
       or (d.follow_up and /*fragment:entity_free*/ true /*end:entity_free*/)
       or (not d.follow_up and /*fragment:entity_head*/ true /*end:entity_head*/
           and /*fragment:entity_no_older_queued*/ true /*end:entity_no_older_queued*/)
), pairs_held as (
    select false as held
)
/*fragment:take*/ select null::text as id, null::text as organization_id, ''::text as integration_connection_id,
    ''::text as command_type, null::text as claim_token, null::int as attempt_count, null::bool as reclaimed,
    null::bool as probe, null::timestamptz as created_at, false as followers, false as held, false as held_behind
/*end:take*/
