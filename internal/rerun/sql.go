package rerun

// Every statement of the rerun aggregate lives here: selecting the candidate
// rows, requeueing them, resolving their open conflicts and writing the
// audit row. Each is scoped by organization_id, so another organization's
// rows are invisible: they come out exactly like ids that do not exist.

// candidateColumns is what the rerun needs to decide per row.
const candidateColumns = `id::text, status, attempt_count`

// selectByIDsSQL reads the listed rows of one organization. $1 organization,
// $2 ids.
const selectByIDsSQL = `
select ` + candidateColumns + `
from external_integration_outbox
where organization_id = $1 and id = any($2::uuid[])
order by created_at, id`

// selectByFilterSQL reads up to $7 rows of one organization matching a
// filter, oldest first. $1 organization, $2 statuses, $3 optional connection,
// $4 optional command type, $5 optional created_at lower bound (inclusive),
// $6 optional upper bound (exclusive).
const selectByFilterSQL = `
select ` + candidateColumns + `
from external_integration_outbox
where organization_id = $1
  and status = any($2::text[])
  and status in ('failed', 'dead_letter', 'uncertain') -- the requeueable ones; lets the tenant index of those rows serve the scan
  and ($3::uuid is null or integration_connection_id = $3)
  and ($4::text is null or command_type = $4)
  and ($5::timestamptz is null or created_at >= $5)
  and ($6::timestamptz is null or created_at < $6)
order by created_at, id
limit $7`

// lockSuffix turns a candidate select into the locking read of a real
// rerun: a concurrent claim, start or record waits for the rerun's
// transaction (or the rerun waits for it and then reads the row's new
// state), so the status checked is the status requeued. Rows are locked in
// created_at order, the order every rerun uses.
const lockSuffix = `
for update`

// requeueSQL puts the decided rows back: queued, due now, attempts reset
// when asked, the old claim and provider state cleared so the claim takes
// them and a crash after the next claim is recovered by its lease.
// last_error and provider_reference stay as history. The status and
// attempts are checked again as a guard. $1 organization, $2 ids,
// $3 resetAttempts, $4 MAX_ATTEMPTS.
const requeueSQL = `
update external_integration_outbox o
set status = 'queued',
    next_attempt_at = now(),
    attempt_count = case when $3::boolean then 0 else o.attempt_count end,
    claim_token = null,
    claimed_at = null,
    lease_expires_at = null,
    started_at = null,
    provider_status = null,
    completed_at = null,
    updated_at = now()
where o.organization_id = $1 and o.id = any($2::uuid[])
  and o.status in ('failed', 'dead_letter', 'uncertain')
  and ($3::boolean or o.attempt_count < $4)
returning o.id::text`

// resolveConflictsSQL resolves the open conflicts of the requeued rows with
// the rerun's reason. $1 organization, $2 ids, $3 reason.
const resolveConflictsSQL = `
update external_integration_conflicts
set status = 'resolved',
    resolved_at = now(),
    resolution_reason = $3,
    updated_at = now()
where organization_id = $1 and outbox_id = any($2::uuid[]) and status = 'open'`

// insertAuditSQL records one rerun. $1 organization, $2 requested_by,
// $3 reason, $4 payload, $5 affected ids, $6 skipped, $7 dispatch_now.
const insertAuditSQL = `
insert into external_integration_rerun_audit (organization_id, requested_by, reason, payload,
    affected_ids, skipped, dispatch_now)
values ($1, $2, $3, $4, $5::uuid[], $6, $7)
returning id::text`
