-- The job the push's command gets (outbox.Job, read by scanJob) for each
-- row of jobs: its columns, its connection, organization scoped, and
-- whether that connection needs reauthorization
-- (integration_outbox_connection_state). The start reads the rows it
-- started so, the peek the one row it previews.
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
    coalesce(cs.unauthorized_reason, case when cs.unauthorized_since is not null then 'the provider refused the connection''s grant' end, '')
from jobs s
left join integration_connections c
    on c.id = s.integration_connection_id and c.organization_id = s.organization_id
left join integration_outbox_connection_state cs
    on cs.connection_id = c.id and cs.organization_id = c.organization_id and cs.unauthorized_since is not null
/*end:job*/
