package report

// Every read view of the operator's CLI lives here; they only read. In the
// listing views $1 is MAX_ATTEMPTS (for the attempts left) and the
// organization is optional; the views of one row require its organization.

// rowColumns is one outbox row as the listing views print it. A host whose
// outbox had its own (nullable) updated_at keeps it, hence the coalesce.
const rowColumns = `
    o.id::text, o.organization_id::text, coalesce(o.integration_connection_id::text, ''),
    coalesce(o.provider, ''), coalesce(o.command_type, ''), o.status, o.attempt_count,
    greatest($1 - o.attempt_count, 0), o.next_attempt_at, o.lease_expires_at,
    coalesce(o.provider_status, ''), coalesce(o.last_error, ''), o.created_at,
    coalesce(o.updated_at, o.created_at)`

// listSQL lists rows newest first. $2 optional organization, $3 optional
// status, $4 optional connection, $5 limit. The queued rows are read in two
// parts, each the condition of a claim index (with a connection: the
// claim's walk index; without: the orphan index), since no other index of
// ours holds the queued rows the host inserts.
const listSQL = `
select` + rowColumns + `
from (
    select o.* from external_integration_outbox o
    where $3::text = 'queued' and o.status = 'queued'
      and o.integration_connection_id is not null
      and ($2::uuid is null or o.organization_id = $2)
      and ($4::uuid is null or o.integration_connection_id = $4)
    union all
    select o.* from external_integration_outbox o
    where $3::text = 'queued' and o.status = 'queued'
      and o.integration_connection_id is null
      and ($2::uuid is null or o.organization_id = $2)
      and $4::uuid is null
    union all
    select o.* from external_integration_outbox o
    where $3::text is distinct from 'queued'
      and ($2::uuid is null or o.organization_id = $2)
      and ($3::text is null or o.status = $3)
      and ($4::uuid is null or o.integration_connection_id = $4)
) o
order by o.created_at desc, o.id
limit $5`

// showRowSQL renders every column of one row of one organization, in table
// order (json, unlike jsonb, keeps the order). $1 organization, $2 id.
const showRowSQL = `
select row_to_json(o)::text
from external_integration_outbox o
where o.organization_id = $1 and o.id = $2`

// conflictsSQL lists the conflicts opened for one row. $1 organization,
// $2 id.
const conflictsSQL = `
select c.id::text, c.conflict_type, c.severity, c.status, coalesce(c.summary, ''),
    c.created_at, c.resolved_at, coalesce(c.resolution_reason, '')
from external_integration_conflicts c
where c.organization_id = $1 and c.outbox_id = $2
order by c.created_at, c.id`

// attemptsSQL lists the attempt history of one row, oldest first.
// $1 organization, $2 id.
const attemptsSQL = `
select a.attempt, a.started_at, a.finished_at, a.outcome, a.provider_called, a.http_status,
    coalesce(a.error_excerpt, ''), coalesce(a.provider_reference, ''), coalesce(a.provider_status, '')
from external_integration_attempts a
where a.organization_id = $1 and a.outbox_id = $2
order by a.attempt, a.created_at, a.id`

// historySQL lists the reruns that requeued or skipped one row.
// $1 organization, $2 id.
const historySQL = `
select a.id::text, a.created_at, coalesce(a.requested_by, ''), a.reason, a.dispatch_now,
    $2::uuid = any(a.affected_ids),
    coalesce((select s->>'reason' from jsonb_array_elements(a.skipped) s
              where s->>'id' = $2::uuid::text limit 1), '')
from external_integration_rerun_audit a
where a.organization_id = $1
  and ($2::uuid = any(a.affected_ids)
       or a.skipped @> jsonb_build_array(jsonb_build_object('id', $2::uuid::text)))
order by a.created_at, a.id`

// The stuck views: each returns up to its limit with the total count of its
// kind. $2 optional organization.

// expiredLeasesSQL: claimed rows whose lease ran out before a result was
// recorded (the push crashed or timed out); the next dispatch claims them
// again, or dead-letters them when no attempts are left. $3 limit.
const expiredLeasesSQL = `
select` + rowColumns + `, count(*) over ()
from external_integration_outbox o
where o.status = 'processing' and o.provider_status is null and o.lease_expires_at < now()
  and ($2::uuid is null or o.organization_id = $2)
order by o.lease_expires_at, o.id
limit $3`

// acceptedWaitingSQL: rows the provider accepted but has not finished for
// longer than $3 seconds; nothing follows them up automatically. $4 limit.
const acceptedWaitingSQL = `
select` + rowColumns + `, count(*) over ()
from external_integration_outbox o
where o.status = 'processing' and o.provider_status is not null
  and o.updated_at < now() - make_interval(secs => $3)
  and ($2::uuid is null or o.organization_id = $2)
order by o.updated_at, o.id
limit $4`

// oldWorkerSQL: rows the old worker left in processing (no claim token of
// ours) that wait for what the install set: a lease it gave a row with
// neither lease nor provider status (the dispatch reclaims the row when it
// ends, or dead-letters it with no attempts left), or the follow-up time it
// gave an accepted row (the dispatch follows it up then). A null time says
// the install has not run since the row was left. Once the time has passed
// the row is in the expired leases, or claimed as a follow-up. $3 limit.
const oldWorkerSQL = `
select` + rowColumns + `,
    case when o.provider_status is null then 'lease' else 'follow_up' end,
    case
        when o.provider_status is null and o.lease_expires_at is null
            then 'no lease yet: make migrate gives it one ending 40 minutes later'
        when o.provider_status is null and o.attempt_count >= $1
            then 'dead-lettered by the dispatch when its lease ends: no attempts left'
        when o.provider_status is null
            then 'claimed again by the dispatch when its lease ends'
        when o.next_attempt_at is null
            then 'no follow-up time yet: make migrate sets one 40 minutes later'
        when o.attempt_count >= $1
            then 'dead-lettered by the dispatch at its follow-up time: no attempts left'
        else 'followed up by the dispatch at its follow-up time'
    end,
    case when o.provider_status is null then o.lease_expires_at else o.next_attempt_at end,
    count(*) over ()
from external_integration_outbox o
where o.status = 'processing' and o.claim_token is null
  and ((o.provider_status is null and (o.lease_expires_at is null or o.lease_expires_at >= now()))
    or (o.provider_status is not null and (o.next_attempt_at is null or o.next_attempt_at > now())))
  and ($2::uuid is null or o.organization_id = $2)
order by case when o.provider_status is null then o.lease_expires_at else o.next_attempt_at end nulls first, o.id
limit $3`

// overdueQueuedSQL: queued rows due for longer than $3 seconds: the
// scheduled dispatch is not taking them. $4 limit.
// Read in two parts, as listSQL's queued rows.
const overdueQueuedSQL = `
select` + rowColumns + `, count(*) over ()
from (
    select o.* from external_integration_outbox o
    where o.status = 'queued' and o.integration_connection_id is not null
      and coalesce(o.next_attempt_at, o.created_at) < now() - make_interval(secs => $3)
      and ($2::uuid is null or o.organization_id = $2)
    union all
    select o.* from external_integration_outbox o
    where o.status = 'queued' and o.integration_connection_id is null
      and coalesce(o.next_attempt_at, o.created_at) < now() - make_interval(secs => $3)
      and ($2::uuid is null or o.organization_id = $2)
) o
order by o.created_at, o.id
limit $4`

// failedSQL: rows waiting for their next attempt, soonest first (a row
// with no attempts left is never claimed again). $3 limit.
const failedSQL = `
select` + rowColumns + `, count(*) over ()
from external_integration_outbox o
where o.status = 'failed'
  and ($2::uuid is null or o.organization_id = $2)
order by o.next_attempt_at nulls first, o.id
limit $3`

// circuitsSQL: connections whose circuit is not closed, or that are failing
// towards it: consecutive retryable failures, the circuit's state, until
// when it holds their rows back, and how many of their rows wait. $1
// optional organization, $2 limit.
const circuitsSQL = `
select h.connection_id::text, h.organization_id::text, coalesce(c.provider, ''),
    case when h.open_until is null then 'closed'
         when h.open_until > now() then 'open'
         else 'half-open' end,
    h.consecutive_failures, h.opened_count, h.open_until, h.opened_at,
    (select count(*) from external_integration_outbox o
     where o.integration_connection_id = h.connection_id and o.organization_id = h.organization_id
       and o.status in ('queued', 'failed'))::int,
    count(*) over ()
from integration_outbox_connection_health h
left join integration_connections c on c.id = h.connection_id and c.organization_id = h.organization_id
where (h.open_until is not null or h.consecutive_failures > 0)
  and ($1::uuid is null or h.organization_id = $1)
order by h.open_until nulls last, h.connection_id
limit $2`

// waitingBehindSQL: the command that holds a queued or failed row, or an
// accepted row's follow-up, back under per-entity order (its connection is
// ordered): another command of its connection and entity in flight (for an
// accepted row: under a live lease, or accepted and older), else, for a
// queued or failed row, the oldest older one still waiting. No row when
// nothing holds it. $1 organization, $2 id. The others are read as the claim
// reads them: in the entity order index (in flight, failed, queued but due
// later), and among the pair's older queued and failed rows in the claim's
// walk index.
const waitingBehindSQL = `
with o as (
    select o.* from external_integration_outbox o
    join integration_connections c on c.id = o.integration_connection_id and c.organization_id = o.organization_id
    where o.organization_id = $1 and o.id = $2
      and (o.status in ('queued', 'failed') or (o.status = 'processing' and o.provider_status is not null))
      and o.local_entity_id is not null
      and coalesce(c.config_json -> 'ordered', 'true'::jsonb) <> 'false'::jsonb
)
select x.id::text
from (
    select x.id, x.status, x.created_at
    from o join external_integration_outbox x
        on x.integration_connection_id = o.integration_connection_id and x.local_entity_id = o.local_entity_id
       and x.local_entity_type is not distinct from o.local_entity_type and x.id <> o.id
    where (x.status in ('failed', 'processing') or (x.status = 'queued' and x.next_attempt_at > x.created_at))
      and ((x.status = 'processing' and (x.lease_expires_at >= now()
                                         or (x.lease_expires_at is null and x.provider_status is null)
                                         or (x.provider_status is not null
                                             and (o.status <> 'processing' or (x.created_at, x.id) < (o.created_at, o.id)))))
           or (o.status <> 'processing' and (x.created_at, x.id) < (o.created_at, o.id)))
    union all
    select x.id, x.status, x.created_at
    from o join external_integration_outbox x
        on x.organization_id = o.organization_id and x.integration_connection_id = o.integration_connection_id
       and x.local_entity_id = o.local_entity_id and x.local_entity_type is not distinct from o.local_entity_type
    where o.status <> 'processing' and x.status in ('queued', 'failed') and (x.created_at, x.id) < (o.created_at, o.id)
) x
order by x.status = 'processing' desc, x.created_at, x.id
limit 1`

// entitiesWaitingSQL: entities of ordered connections whose first live
// command (queued, failed or processing, oldest first) is older than $3
// seconds and has others waiting behind it: one row per entity, oldest
// head first. $1 MAX_ATTEMPTS, $2 optional organization, $4 limit.
const entitiesWaitingSQL = `
with live as (
    select o.*,
        row_number() over w as place,
        count(*) over (partition by o.integration_connection_id, o.local_entity_type, o.local_entity_id) as live
    from external_integration_outbox o
    join integration_connections c on c.id = o.integration_connection_id and c.organization_id = o.organization_id
    where o.status in ('queued', 'failed', 'processing') and o.local_entity_id is not null
      and coalesce(c.config_json -> 'ordered', 'true'::jsonb) <> 'false'::jsonb
      and ($2::uuid is null or o.organization_id = $2)
    window w as (partition by o.integration_connection_id, o.local_entity_type, o.local_entity_id
                 order by o.created_at, o.id)
)
select coalesce(o.local_entity_type, ''), o.local_entity_id::text, (o.live - 1)::int,` + rowColumns + `, count(*) over ()
from live o
where o.place = 1 and o.live > 1 and o.created_at < now() - make_interval(secs => $3)
order by o.created_at, o.id
limit $4`
