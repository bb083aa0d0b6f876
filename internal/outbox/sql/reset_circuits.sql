-- Resets every circuit: what a store with the circuit breaker off does once,
-- before its first claim (internal/outbox Store.ClaimBatch), so that a
-- connection whose circuit was open when the breaker was switched off is
-- not held by it once the breaker is on again.

delete from integration_outbox_connection_health
