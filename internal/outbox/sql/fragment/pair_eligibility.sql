-- Whether the walk's pair p (organization p.org, connection p.conn) has a row
-- the claim may take (ok), or due rows that an in-flight limit holds back
-- (held), and the created_at of its oldest such row (first_at): the claim's
-- due rows of the pair are read from there on, so the rows before it (due
-- commands that per-entity order holds back) are read once per claim, not
-- twice. A pair whose circuit is open costs no look at its rows.

    select r.room, r.probe, r.ordered, r.room > 0 and f.first_at is not null as ok,
        r.capped and f.first_at is not null as held, f.first_at
    from (/*fragment:connection_room*/) r
    left join lateral (
        select d.created_at as first_at from external_integration_outbox d
        where not r.open
          and d.organization_id = p.org and d.integration_connection_id = p.conn
          and d.status in ('queued', 'failed')
          and coalesce(d.next_attempt_at, now()) <= now()
          and d.attempt_count < @max_attempts
          and (not r.ordered or /*fragment:entity_head*/)
        order by d.created_at
        limit 1
    ) f on true
