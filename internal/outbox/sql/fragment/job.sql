-- The job the push's command gets (outbox.Job, read by scanJob) for each
-- row of jobs: its columns, its connection, organization scoped, whether
-- that connection needs reauthorization
-- (integration_outbox_connection_state), and, from the row's attempts,
-- when its first attempt whose outcome is unknown started (the earliest
-- of its history's outcome_unknown attempts and of the starts of its
-- earlier claims that no record ended: a push that crashed or ran out of
-- time; the dispatch run's sweep turns those into history rows) and
-- whether an operator reran it since (external_integration_rerun_audit).
-- Only a row tried before reads its history: one claimed again
-- (attempt_count above 1) or with a last_error (every result of unknown
-- outcome, expired lease and release writes one, and a rerun keeps it): a
-- first attempt, the normal path, reads nothing more than before, whatever
-- the statistics of the history say. Only a row claimed again after an
-- expired lease (attempt_count above 1) reads the starts: a row's start
-- that no record ended leaves the table when the row is released
-- (release_dead_lettered.sql) or ended (dead_letter_expired.sql), both
-- writing its history row, so a row rerun with its attempts reset has
-- none left. The start reads the rows it started so, the peek the one row
-- it previews.
--
-- Stand-in context: jobs.

with jobs as (select * from external_integration_outbox)
/*begin:job*/
select s.id::text, s.organization_id::text, coalesce(s.integration_connection_id::text, ''),
    coalesce(s.command_type, ''), coalesce(s.local_entity_type, ''), coalesce(s.local_entity_id::text, ''),
    coalesce(s.payload_json::jsonb, '{}'::jsonb), coalesce(s.idempotency_key, s.id::text),
    s.attempt_count, coalesce(s.claim_token::text, ''),
    c.id is not null, coalesce(c.location_id::text, ''), coalesce(c.provider, ''),
    coalesce(c.credential_reference, ''), coalesce(c.config_json::jsonb, '{}'::jsonb),
    coalesce(cs.unauthorized_reason, case when cs.unauthorized_since is not null then 'the provider refused the connection''s grant' end, ''),
    uk.since,
    uk.since is not null and exists (
        select 1 from external_integration_rerun_audit ra
        where ra.organization_id = s.organization_id and ra.created_at > uk.since and s.id = any(ra.affected_ids))
from jobs s
cross join lateral (
    select min(u.started_at) as since from (
        select a.started_at from external_integration_attempts a
        where (s.attempt_count > 1 or s.last_error is not null)
          and a.organization_id = s.organization_id and a.outbox_id = s.id and a.outcome_unknown
        union all
        select st.started_at from integration_outbox_starts st
        where s.attempt_count > 1 and st.outbox_id = s.id and st.organization_id = s.organization_id
          and st.started_at is not null and st.claim_token is distinct from s.claim_token) u
) uk
left join integration_connections c
    on c.id = s.integration_connection_id and c.organization_id = s.organization_id
left join integration_outbox_connection_state cs
    on cs.connection_id = c.id and cs.organization_id = c.organization_id and cs.unauthorized_since is not null
/*end:job*/
