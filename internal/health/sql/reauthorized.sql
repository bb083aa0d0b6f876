-- Ends the unauthorized hold of the connection @connection_id of
-- @organization_id (its credentials were replaced): the claim takes its rows
-- again. With a @resolution, its open connection_unauthorized conflicts are
-- resolved now with that reason (the host reconnected it); without one, the
-- conflict stays open until a call goes through (the record statement then
-- resolves it). Either way the first call that goes through writes
-- Connection Recovered. It returns whether the connection was unauthorized
-- and how many conflicts it resolved.

with ended as (
    update integration_outbox_connection_state
    set unauthorized_since = null, unauthorized_reason = null, updated_at = now()
    where connection_id = @connection_id::uuid and organization_id = @organization_id::uuid
      and unauthorized_since is not null
    returning connection_id
), resolved as (
    update external_integration_conflicts x
    set status = 'resolved', resolved_at = now(), resolution_reason = @resolution::text
    where @resolution::text <> ''
      and x.integration_connection_id = @connection_id::uuid and x.organization_id = @organization_id::uuid
      and x.conflict_type = 'connection_unauthorized' and x.status = 'open'
    returning x.id
), due as (
    update external_integration_outbox o
    set next_attempt_at = now(), updated_at = now()
    where o.organization_id = @organization_id::uuid and o.integration_connection_id = @connection_id::uuid
      and o.status in ('queued', 'failed') and o.next_attempt_at > now()
      and (o.waiting_for_outbox_id is null or o.status <> 'queued')
      and exists (select 1 from ended)
    returning o.id
)
select exists (select 1 from ended), (select count(*) from resolved), (select count(*) from due)
