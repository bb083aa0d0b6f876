-- Enables the disabled connection @connection_id of @organization_id again
-- (the console's enableConnection): the claim takes its rows again, and the
-- time to disable it counts from now (enabled_at), so the next failure does
-- not disable it at once; failing_since stays, for the Connection Recovered
-- event. Its held rows become due now, so they flow oldest first (per-entity
-- order still holds). Its connection_disabled conflict stays open until a
-- call goes through (the record statement then resolves it and writes
-- Connection Recovered). It returns one row when the connection exists:
-- when it was disabled (null: it was not) and how many held rows became due.

with conn as (
    select c.id from integration_connections c
    where c.id = @connection_id::uuid and c.organization_id = @organization_id::uuid
), before as (
    select s.connection_id, s.disabled_at from integration_outbox_connection_state s
    where s.connection_id = @connection_id::uuid and s.organization_id = @organization_id::uuid
    for update
), enabled as (
    update integration_outbox_connection_state s
    set disabled_at = null, disabled_reason = null, enabled_at = now(), updated_at = now()
    from before b
    where s.connection_id = b.connection_id and b.disabled_at is not null
    returning s.connection_id
), due as (
    update external_integration_outbox o
    set next_attempt_at = now(), updated_at = now()
    where o.organization_id = @organization_id::uuid and o.integration_connection_id = @connection_id::uuid
      and o.status in ('queued', 'failed') and o.next_attempt_at > now()
      and (o.waiting_for_outbox_id is null or o.status <> 'queued')
      and exists (select 1 from enabled)
    returning o.id
)
select (select b.disabled_at from before b), (select count(*) from due)
from conn
