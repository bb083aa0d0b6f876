package retention

// deleteBatchSQL deletes up to $2 completed or unsupported rows whose
// completed_at is older than $1 seconds, with their attempt history, and
// returns how many rows it deleted. Conflicts and rerun audits are kept.
//
// It locks with SKIP LOCKED, so it never waits on a row anybody holds, and it
// only ever matches terminal rows, which no claim or record touches (the
// claim scans partial indexes of the claimable and leased states only). There
// is no order and no index on completed_at: an index would cost every
// completion a write on the hot path; the sequential scan stops once it has
// found $2 rows, and the oldest rows sit at the start of the table.
const deleteBatchSQL = `
with doomed as (
    select id, organization_id from external_integration_outbox
    where status in ('completed', 'unsupported')
      and completed_at < now() - make_interval(secs => $1)
    limit $2
    for update skip locked
), attempts as (
    delete from external_integration_attempts a
    using doomed d
    where a.organization_id = d.organization_id and a.outbox_id = d.id
), deleted as (
    delete from external_integration_outbox o
    using doomed d
    where o.id = d.id and o.status in ('completed', 'unsupported')
    returning o.id
)
select count(*) from deleted`

// batchTimeoutsSQL bounds one batch's transaction: it gives up rather than
// queue behind a lock (lock_timeout) or run long (statement_timeout).
const batchTimeoutsSQL = `select set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true)`
