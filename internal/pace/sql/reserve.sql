-- Takes the next call slot of the connection @connection_id (of
-- @organization_id) for a provider limited to one call per
-- @interval_seconds: the slot is the later of its next_call_at, the end of
-- its pause and now, and next_call_at moves one interval past it. A slot
-- further than @max_wait_seconds from now is not taken (nothing is written):
-- reserved is false and slot says when to come back. The row lock of the
-- upsert orders concurrent containers; it is held for this statement only.

with seen as (
    select greatest(p.next_call_at, coalesce(p.paused_until, now()), now()) as slot
    from integration_outbox_connection_pace p
    where p.connection_id = @connection_id::uuid
), taken as (
    insert into integration_outbox_connection_pace as p (connection_id, organization_id, next_call_at, updated_at)
    select @connection_id::uuid, @organization_id::uuid, now() + make_interval(secs => @interval_seconds::float8), now()
    where coalesce((select slot from seen), now()) <= now() + make_interval(secs => @max_wait_seconds::float8)
    on conflict (connection_id) do update
    set next_call_at = greatest(p.next_call_at, coalesce(p.paused_until, now()), now())
            + make_interval(secs => @interval_seconds::float8),
        updated_at = now()
    where greatest(p.next_call_at, coalesce(p.paused_until, now()), now())
        <= now() + make_interval(secs => @max_wait_seconds::float8)
    returning p.next_call_at - make_interval(secs => @interval_seconds::float8) as slot
)
select coalesce((select slot from taken), (select slot from seen), now()) as slot,
    exists (select 1 from taken) as reserved
