-- The connections a claim gives no room, or one probe, read once per claim
-- from our own tables (each holds a row per connection that has failed, been
-- paced or been stopped; none of the host's): open, the circuits open (with
-- the breaker on, @circuit_on); half_open, the circuits whose cooldown is
-- over (with the breaker on); stopped, the connections their provider has
-- paused (a 429, until its Retry-After: internal/pace) and those disabled or
-- waiting for reauthorization (integration_outbox_connection_state:
-- internal/health; a refused OAuth2 grant marks it there in the transaction
-- that records the refused secret version, internal/credential).
-- fragment/connection_room.sql looks each pair up in them.

with halts as (
/*begin:halts*/
    select array(select h.connection_id from integration_outbox_connection_health h
                 where @circuit_on::bool and h.open_until > now()) as open,
        array(select h.connection_id from integration_outbox_connection_health h
              where @circuit_on::bool and h.open_until <= now()) as half_open,
        array(select pc.connection_id from integration_outbox_connection_pace pc
              where pc.paused_until > now()
              union all
              select st.connection_id from integration_outbox_connection_state st
              where st.disabled_at is not null or st.unauthorized_since is not null) as stopped
/*end:halts*/
)
select * from halts
