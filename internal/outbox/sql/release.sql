-- Puts claimed rows whose message could not be sent back: due now (or,
-- held, after @delay_seconds with @reason as their last_error), the
-- attempt not consumed, the claim dropped. The claims come as one array per
-- column: @ids, @organization_ids, @claim_tokens, @connection_ids.
--
-- A message that failed to send may still have reached the queue, so its
-- push may be starting right now: the release consumes each claim first,
-- as the start does (integration_outbox_starts, started_at null), and gives
-- back only the claims it consumed. Whichever of a release and a start of
-- one claim inserts its token first wins; the other does nothing. A start
-- that has already begun keeps its row.

with req as (
    select * from unnest(@ids::text[]::uuid[], @organization_ids::text[]::uuid[], @claim_tokens::text[]::uuid[], @connection_ids::text[]::uuid[])
        as r(id, organization_id, claim_token, connection_id)
), given_back as (
    insert into integration_outbox_starts (claim_token, outbox_id, organization_id)
    select r.claim_token, r.id, r.organization_id
    from req r
    order by r.claim_token
    on conflict (claim_token) do nothing
    returning claim_token
)
update external_integration_outbox o
set status = 'queued',
    attempt_count = greatest(o.attempt_count - 1, 0),
    claim_token = null,
    claimed_at = null,
    lease_expires_at = null,
    next_attempt_at = case when @delay_seconds::float8 > 0 then now() + make_interval(secs => @delay_seconds::float8) end,
    last_error = coalesce(integration_outbox_fit(@reason::text, 'external_integration_outbox', 'last_error'), o.last_error),
    updated_at = now()
from req r
join given_back g on g.claim_token = r.claim_token
where o.id = r.id and o.organization_id = r.organization_id
  and o.integration_connection_id is not distinct from r.connection_id
  and o.claim_token = r.claim_token and o.status = 'processing' and o.started_at is null
