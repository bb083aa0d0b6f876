-- How many more rows of the connection p.conn (of the organization p.org) a
-- claim may lease (the statement's halts: fragment/halts.sql): none while
-- its circuit is open and one probe, when nothing else of it is in flight,
-- once the cooldown is over; none while it is stopped (its provider paused
-- it, or it is disabled or waiting for reauthorization); each of these
-- holds its rows without counting them as held; else its in-flight limit
-- (config_json.maxInFlight, a positive number, else its provider's default
-- in @provider_max_in_flight, a JSON object keyed by provider name, else
-- @connection_max_in_flight; none when all are unset) minus its leased
-- rows. open says the claim reads none of its rows; probe that the row
-- would be the half-open circuit's probe; paused that it is stopped; capped
-- that the in-flight limit is what leaves no room; ordered that the
-- connection keeps per-entity order (config_json.ordered is not false).
--
-- Stand-in context: the pair p and halts.

with halts as (
    select '{}'::uuid[] as open, '{}'::uuid[] as half_open, '{}'::uuid[] as stopped
)
select r.*
from (values (null::uuid, null::uuid)) as p(org, conn)
cross join lateral (
/*begin:connection_room*/
    select k.open or k.stopped as open, k.open or k.half_open as probe, k.stopped as paused,
        case when k.open or k.stopped then 0
             when k.half_open then case when f.n = 0 then 1 else 0 end
             when cap.n is null then 1000000
             else greatest(cap.n - f.n, 0) end as room,
        not (k.open or k.stopped or k.half_open) and cap.n is not null and f.n >= cap.n as capped,
        cap.ordered
    from (select p.conn = any(x.open) as open, p.conn = any(x.half_open) as half_open,
              p.conn = any(x.stopped) as stopped
          from halts x) k
    cross join (select coalesce(cc.n, cc.provider_n, nullif(@connection_max_in_flight::int, 0)) as n,
              coalesce(cc.ordered, true) as ordered
          from (select 1) one
          left join lateral (
            select case when jsonb_typeof((c.config_json -> 'maxInFlight')::jsonb) = 'number'
                         and (c.config_json ->> 'maxInFlight')::numeric >= 1
                    then least(floor((c.config_json ->> 'maxInFlight')::numeric), 1000000)::int end as n,
                (@provider_max_in_flight::jsonb ->> c.provider)::int as provider_n,
                coalesce((c.config_json -> 'ordered')::jsonb, 'true'::jsonb) <> 'false'::jsonb as ordered
            from integration_connections c
            where c.id = p.conn and c.organization_id = p.org) cc on true) cap
    cross join lateral (
        select count(*)::int as n from (
            select 1 from external_integration_outbox l
            where l.integration_connection_id = p.conn
              and l.status = 'processing' and l.provider_status is null and l.lease_expires_at > now()
            limit coalesce(cap.n, 1)) leased
    ) f
/*end:connection_room*/
) r
