-- A stuck view: rows the old worker left in processing (no claim token of
-- ours) that wait for what the install set: a lease it gave a row with
-- neither lease nor provider status (the dispatch reclaims the row when it
-- ends, or dead-letters it with no attempts left, @max_attempts), or the
-- follow-up time it gave an accepted row (the dispatch follows it up then).
-- A null time says the install has not run since the row was left. Once the
-- time has passed the row is in the expired leases, or claimed as a
-- follow-up. Of the organization @organization_id when not null; up to
-- @limit, each with its kind, what will happen to it and when, and the total
-- count. The row columns are list.sql's.

select o.id::text, o.organization_id::text, coalesce(o.integration_connection_id::text, ''),
    coalesce(o.provider, ''), coalesce(o.command_type, ''), o.status, o.attempt_count,
    greatest(@max_attempts::int - o.attempt_count, 0), o.next_attempt_at::timestamptz, o.lease_expires_at,
    coalesce(o.provider_status, ''), coalesce(o.last_error, ''), o.created_at::timestamptz,
    coalesce(o.updated_at, o.created_at),
    case when o.provider_status is null then 'lease' else 'follow_up' end,
    case
        when o.provider_status is null and o.lease_expires_at is null
            then 'no lease yet: make migrate gives it one ending 40 minutes later'
        when o.provider_status is null and o.attempt_count >= @max_attempts::int
            then 'dead-lettered by the dispatch when its lease ends: no attempts left'
        when o.provider_status is null
            then 'claimed again by the dispatch when its lease ends'
        when o.next_attempt_at is null
            then 'no follow-up time yet: make migrate sets one 40 minutes later'
        when o.attempt_count >= @max_attempts::int
            then 'dead-lettered by the dispatch at its follow-up time: no attempts left'
        else 'followed up by the dispatch at its follow-up time'
    end,
    case when o.provider_status is null then o.lease_expires_at else o.next_attempt_at end,
    count(*) over ()
from external_integration_outbox o
where o.status = 'processing' and o.claim_token is null
  and ((o.provider_status is null and (o.lease_expires_at is null or o.lease_expires_at >= now()))
    or (o.provider_status is not null and (o.next_attempt_at is null or o.next_attempt_at > now())))
  and (@organization_id::uuid is null or o.organization_id = @organization_id::uuid)
order by case when o.provider_status is null then o.lease_expires_at else o.next_attempt_at end nulls first, o.id
limit @limit::bigint
