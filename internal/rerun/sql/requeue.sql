-- Puts the decided rows @ids of the organization @organization_id back:
-- queued, due now, attempts reset when @reset_attempts, the old claim and
-- provider state cleared so the claim takes them and a crash after the next
-- claim is recovered by its lease. last_error and provider_reference stay as
-- history. The status and attempts (below @max_attempts, MAX_ATTEMPTS,
-- unless reset) are checked again as a guard. Returns the ids it requeued.

update external_integration_outbox o
set status = 'queued',
    next_attempt_at = now(),
    attempt_count = case when @reset_attempts::boolean then 0 else o.attempt_count end,
    claim_token = null,
    claimed_at = null,
    lease_expires_at = null,
    started_at = null,
    provider_status = null,
    completed_at = null,
    updated_at = now()
where o.organization_id = @organization_id::uuid and o.id = any(@ids::uuid[])
  and o.status in ('failed', 'dead_letter', 'uncertain')
  and (@reset_attempts::boolean or o.attempt_count < @max_attempts::int)
returning o.id::text
