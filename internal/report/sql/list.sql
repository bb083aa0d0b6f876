-- Lists rows newest first, at most @limit: of the organization
-- @organization_id, in the status @status and of the connection
-- @connection_id, each only when not null. The row columns are an outbox row
-- as every listing view prints it (the stuck views' statements repeat them
-- as they stand here, which sql_test.go checks), @max_attempts (MAX_ATTEMPTS)
-- giving the attempts left; a host whose outbox had its own (nullable)
-- updated_at keeps it, hence the coalesce.
--
-- The queued rows are read in three parts, each the condition of an index
-- (with a connection: the claim's walk index; parked followers, which that
-- index does not hold: the waiting index; without a connection: the orphan
-- index), since no other index of ours holds the queued rows the host
-- inserts.

select o.id::text, o.organization_id::text, coalesce(o.integration_connection_id::text, ''),
    coalesce(o.provider, ''), coalesce(o.command_type, ''), o.status, o.attempt_count,
    greatest(@max_attempts::int - o.attempt_count, 0), o.next_attempt_at::timestamptz, o.lease_expires_at,
    coalesce(o.provider_status, ''), coalesce(o.last_error, ''), o.created_at::timestamptz,
    coalesce(o.updated_at, o.created_at)
from (
    select o.* from external_integration_outbox o
    where (@organization_id::uuid is null or o.organization_id = @organization_id::uuid)
      and @status::text = 'queued' and o.status = 'queued'
      and o.integration_connection_id is not null
      and (o.waiting_for_outbox_id is null or o.status <> 'queued')
      and (@connection_id::uuid is null or o.integration_connection_id = @connection_id::uuid)
    union all
    select o.* from external_integration_outbox o
    where (@organization_id::uuid is null or o.organization_id = @organization_id::uuid)
      and @status::text = 'queued' and o.status = 'queued'
      and o.waiting_for_outbox_id is not null
      and (@connection_id::uuid is null or o.integration_connection_id = @connection_id::uuid)
    union all
    select o.* from external_integration_outbox o
    where (@organization_id::uuid is null or o.organization_id = @organization_id::uuid)
      and @status::text = 'queued' and o.status = 'queued'
      and o.integration_connection_id is null
      and @connection_id::uuid is null
    union all
    select o.* from external_integration_outbox o
    where (@organization_id::uuid is null or o.organization_id = @organization_id::uuid)
      and @status::text is distinct from 'queued'
      and (@status::text is null or o.status::text = @status::text)
      and (@connection_id::uuid is null or o.integration_connection_id = @connection_id::uuid)
) o
order by o.created_at desc, o.id
limit @limit::bigint
