-- How many more rows of the connection p.conn (of the organization p.org) a
-- claim may lease: with the breaker on (@circuit_on), none while its circuit is open and
-- one probe, when nothing else of it is in flight, once the cooldown is over;
-- none while its provider has paused it (a 429: paused_until, internal/pace);
-- none while it is disabled or unauthorized (integration_outbox_connection_state,
-- internal/health; a refused OAuth2 grant marks it there in the transaction
-- that records the refused secret version, internal/credential); each of
-- these holds its rows without counting them as held;
-- else its in-flight limit (config_json.maxInFlight, a positive number, else
-- its provider's default in @provider_max_in_flight, a JSON object keyed by
-- provider name, else @connection_max_in_flight; none when all are unset)
-- minus its leased rows. probe says the row would be the half-open circuit's
-- probe; paused that a pause, a disable or a refused grant leaves no room; capped that the in-flight limit
-- is what leaves no room; ordered that the connection keeps per-entity order
-- (config_json.ordered is not false).
--
-- Stand-in context: the pair p.

select r.*
from (values (null::uuid, null::uuid)) as p(org, conn)
cross join lateral (
/*begin:connection_room*/
    select coalesce(h.open_until > now(), false) or coalesce(pc.paused_until > now(), false)
            or st.connection_id is not null as open,
        h.open_until is not null as probe,
        coalesce(pc.paused_until > now(), false) or st.connection_id is not null as paused,
        case when pc.paused_until > now() or st.connection_id is not null then 0
             when h.open_until > now() then 0
             when h.open_until is not null then case when f.n = 0 then 1 else 0 end
             when cap.n is null then 1000000
             else greatest(cap.n - f.n, 0) end as room,
        not coalesce(pc.paused_until > now(), false) and st.connection_id is null
            and h.open_until is null and cap.n is not null and f.n >= cap.n as capped,
        cap.ordered
    from (select coalesce(cc.n, cc.provider_n, nullif(@connection_max_in_flight::int, 0)) as n,
              coalesce(cc.ordered, true) as ordered
          from (select 1) one
          left join lateral (
            select case when jsonb_typeof(c.config_json -> 'maxInFlight') = 'number'
                         and (c.config_json ->> 'maxInFlight')::numeric >= 1
                    then least(floor((c.config_json ->> 'maxInFlight')::numeric), 1000000)::int end as n,
                (@provider_max_in_flight::jsonb ->> c.provider)::int as provider_n,
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
    left join integration_outbox_connection_health h on h.connection_id = p.conn and @circuit_on::bool
    left join integration_outbox_connection_pace pc on pc.connection_id = p.conn
    left join integration_outbox_connection_state st on st.connection_id = p.conn
        and (st.disabled_at is not null or st.unauthorized_since is not null)
/*end:connection_room*/
) r
