-- Marks the events @ids that EventBridge accepted as published.

update integration_outbox_events
set published_at = now(), last_error = null
where id = any(@ids::text[]::uuid[]) and published_at is null
