-- Deletes up to @batch_size completed or unsupported rows whose completed_at
-- is older than @age_seconds, with their attempt history, and returns how
-- many rows it deleted. Conflicts and rerun audits are kept.
--
-- It locks with SKIP LOCKED, so it never waits on a row anybody holds, and it
-- only ever matches terminal rows, which no claim or record touches (the
-- claim scans partial indexes of the claimable and leased states only). There
-- is no order and no index on completed_at: an index would cost every
-- completion a write on the hot path; the sequential scan stops once it has
-- found @batch_size rows, and the oldest rows sit at the start of the table.

with doomed as (
    select id, organization_id from external_integration_outbox
    where status in ('completed', 'unsupported')
      and completed_at < now() - make_interval(secs => @age_seconds::float8)
    limit @batch_size::bigint
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
select count(*) from deleted
