-- Whether the walk's pair p (organization p.org, connection p.conn) has a row
-- the claim may take (ok), or due rows that an in-flight limit holds back
-- (held). A pair whose circuit is open costs no look at its rows.

    select k.room, k.probe, k.ordered, k.room > 0 and k.due as ok, k.capped and k.due as held
    from (
        select r.room, r.probe, r.ordered, r.capped, not r.open and exists (
                select 1 from external_integration_outbox d
                where d.organization_id = p.org and d.integration_connection_id = p.conn
                  and d.status in ('queued', 'failed')
                  and coalesce(d.next_attempt_at, now()) <= now()
                  and d.attempt_count < @max_attempts
                  and (not r.ordered or /*fragment:entity_head*/)) as due
        from (/*fragment:connection_room*/) r
    ) k
