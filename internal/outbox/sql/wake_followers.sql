-- Makes due the followers parked behind the dispatch run's own heads
-- (@heads: the rows it claimed with followers, ClaimParams.Heads) that
-- ended without waking them: the record of a head's result wakes the one
-- parked behind it (record.sql's woken step), but a head ended by anything
-- else (the host, an operator's tool) does not, and the run, which waits for
-- its heads, would otherwise leave that follower to the next run's sweep
-- (dead_letter_expired.sql's unparked step). Run in the claim's transaction
-- before the claim, only when the run has heads: one probe of the waiting
-- index per head.

update external_integration_outbox w
set /*fragment:wake*/ updated_at = now() /*end:wake*/
where w.waiting_for_outbox_id is not null and w.waiting_for_outbox_id = any(@heads::text[]::uuid[])
  and w.status = 'queued'
  and not exists (select 1 from external_integration_outbox a
                  where a.id = w.waiting_for_outbox_id and a.status in ('queued', 'failed', 'processing'))
