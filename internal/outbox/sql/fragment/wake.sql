-- Wakes the waiting rows the statement updates (alias w): each is due
-- again, since its creation, not since now(): now() is the transaction's
-- start, and a claim whose own transaction began before it would not find
-- the row due yet (and a dispatch run no longer waiting for the awaited row
-- would end without it). A parked follower (queued) leaves its chain and comes
-- back into the claim's walk index; a failed row keeps the name of the row
-- it waited for until its next claim. The record of an awaited row's end
-- (record.sql), the dead-letter sweep (dead_letter_expired.sql: the rows
-- waiting for a row it ends, and those whose awaited row ended without
-- waking them) and the claim's wake of its heads' followers
-- (wake_followers.sql) wake with it.
--
-- Stand-in context: the outbox row being updated.

update external_integration_outbox w
set /*begin:wake*/
    next_attempt_at = least(now(), w.created_at),
    waiting_for_outbox_id = case when w.status = 'queued' then null else w.waiting_for_outbox_id end,
    updated_at = now()
/*end:wake*/
where false
