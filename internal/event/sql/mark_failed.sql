-- Gives the events @ids, whose PutEvents failed (@errors: why, one per id),
-- back to the next run: due again @retry_seconds from now.

update integration_outbox_events e
set publish_after = now() + make_interval(secs => @retry_seconds), last_error = left(r.error, 1000)
from unnest(@ids::text[]::uuid[], @errors::text[]) as r(id, error)
where e.id = r.id and e.published_at is null
