-- Counts the connections that are disabled, unauthorized, and failing (for
-- long enough to have their connection_failing conflict open), across all
-- organizations: the dispatch run's metrics.

select count(*) filter (where disabled_at is not null),
    count(*) filter (where unauthorized_since is not null),
    count(*) filter (where failing_conflict_id is not null and failing_since is not null)
from integration_outbox_connection_state
where disabled_at is not null or unauthorized_since is not null or failing_conflict_id is not null
