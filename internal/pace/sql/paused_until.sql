-- The end of the running pause of the connection @connection_id, if any,
-- and why it was paused.

select paused_until, coalesce(pause_reason, '') from integration_outbox_connection_pace
where connection_id = @connection_id::uuid and paused_until > now()
