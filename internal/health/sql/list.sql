-- Lists the connections of @organization_id (all organizations when null)
-- that are disabled, unauthorized or failing (failing_since set), with since
-- when and why, the longest-standing first, at most @list_limit.

select s.connection_id::text, s.organization_id::text, coalesce(s.provider, ''),
    case when s.disabled_at is not null then 'disabled'
         when s.unauthorized_since is not null then 'unauthorized'
         else 'failing' end as state,
    coalesce(s.disabled_at, s.unauthorized_since, s.failing_since) as since,
    s.failing_since, s.last_failure_at,
    coalesce(s.disabled_reason, s.unauthorized_reason, s.last_error, '') as reason,
    (select count(*) from external_integration_outbox o
     where o.organization_id = s.organization_id and o.integration_connection_id = s.connection_id
       and o.status in ('queued', 'failed') and (o.waiting_for_outbox_id is null or o.status <> 'queued'))
    -- and the parked followers, which the claim's walk index does not hold
    + (select count(*) from external_integration_outbox o
       where o.waiting_for_outbox_id is not null and o.status = 'queued'
         and o.organization_id = s.organization_id and o.integration_connection_id = s.connection_id) as waiting
from integration_outbox_connection_state s
where (@organization_id::uuid is null or s.organization_id = @organization_id::uuid)
  and (s.disabled_at is not null or s.unauthorized_since is not null or s.failing_since is not null)
order by coalesce(s.disabled_at, s.unauthorized_since, s.failing_since), s.connection_id
limit @list_limit
