-- Ends the unauthorized hold of the connection @connection_id of
-- @organization_id (its credentials were replaced): the claim takes its rows
-- again. Its connection_unauthorized conflict stays open until a call goes
-- through (the record statement then resolves it and writes Connection
-- Recovered). It returns whether the connection was unauthorized.

update integration_outbox_connection_state
set unauthorized_since = null, unauthorized_reason = null, updated_at = now()
where connection_id = @connection_id::uuid and organization_id = @organization_id::uuid
  and unauthorized_since is not null
