-- Takes up to @take_limit events not yet published whose turn has come,
-- oldest first, skipping those another publisher holds: each is kept from
-- other publishers for @lease_seconds (publish_after) while this one sends
-- it, and counts one more attempt. A publisher that dies before it answers
-- leaves them to the next run once the lease is over. It also deletes up to
-- 1000 events published more than @keep_seconds ago.

with picked as (
    select e.id from integration_outbox_events e
    where e.published_at is null and e.publish_after <= now()
    order by e.publish_after, e.created_at
    limit @take_limit
    for update skip locked
), pruned as (
    delete from integration_outbox_events d
    where d.id in (select p.id from integration_outbox_events p
                   where p.published_at < now() - make_interval(secs => @keep_seconds)
                   limit 1000)
)
update integration_outbox_events e
set publish_after = now() + make_interval(secs => @lease_seconds),
    publish_attempts = e.publish_attempts + 1
from picked
where e.id = picked.id
returning e.id::text, e.detail_type, e.detail::text, e.created_at
