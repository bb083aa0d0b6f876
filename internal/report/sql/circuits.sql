-- A stuck view: connections whose circuit is not closed, or that are failing
-- towards it: consecutive retryable failures, the circuit's state, until
-- when it holds their rows back, and how many of their rows wait. Of the
-- organization @organization_id when not null; up to @limit, each with the
-- total count.

select h.connection_id::text, h.organization_id::text, coalesce(c.provider, ''),
    case when h.open_until is null then 'closed'
         when h.open_until > now() then 'open'
         else 'half-open' end,
    h.consecutive_failures, h.opened_count, h.open_until, h.opened_at,
    ((select count(*) from external_integration_outbox o
      where o.integration_connection_id = h.connection_id and o.organization_id = h.organization_id
        and o.status in ('queued', 'failed') and (o.waiting_for_outbox_id is null or o.status <> 'queued'))
     -- and the parked followers, which the claim's walk index does not hold
     + (select count(*) from external_integration_outbox o
        where o.waiting_for_outbox_id is not null and o.status = 'queued'
          and o.integration_connection_id = h.connection_id and o.organization_id = h.organization_id))::int,
    count(*) over ()
from integration_outbox_connection_health h
left join integration_connections c on c.id = h.connection_id and c.organization_id = h.organization_id
where (h.open_until is not null or h.consecutive_failures > 0)
  and (@organization_id::uuid is null or h.organization_id = @organization_id::uuid)
order by h.open_until nulls last, h.connection_id
limit @limit::bigint
