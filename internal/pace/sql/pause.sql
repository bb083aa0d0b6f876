-- Pauses the connection @connection_id (of @organization_id) until @until:
-- no call of any container and no claim of its rows before then. A pause
-- already running longer is kept.

insert into integration_outbox_connection_pace as p (connection_id, organization_id, next_call_at,
    paused_until, pause_reason, updated_at)
values (@connection_id::uuid, @organization_id::uuid, now(), @until::timestamptz, @reason::text, now())
on conflict (connection_id) do update
set paused_until = greatest(coalesce(p.paused_until, @until::timestamptz), @until::timestamptz),
    pause_reason = case when p.paused_until > @until::timestamptz then p.pause_reason else @reason::text end,
    updated_at = now()
