-- The fence of a record (record.sql, record_completed.sql): the outbox
-- row o is recorded for the outcome res only while the outcome's claim is
-- the row's and was started (integration_outbox_starts, st, whose
-- started_at the record writes back), in its organization and connection,
-- still processing under its lease.
--
-- Stand-in context: the outcomes (res) and the row being updated (o).

with res as (
    select null::uuid as id, null::uuid as organization_id, null::uuid as claim_token, null::uuid as connection_id
)
update external_integration_outbox o
set updated_at = now()
    from res join integration_outbox_starts st on /*begin:record_fence*/
    -- Only a started claim records (start.sql).
    st.claim_token = res.claim_token and st.outbox_id = res.id and st.started_at is not null
    where o.id = res.id and o.organization_id = res.organization_id
      and o.integration_connection_id is not distinct from res.connection_id
      and o.claim_token = res.claim_token
      and o.status = 'processing'
      -- Recording ends the lease: a repeat of the same record (its commit
      -- acknowledgement lost) matches nothing and writes no second attempt.
      and o.lease_expires_at is not null
/*end:record_fence*/
