-- Reads one row as the start hands it to its command, and writes nothing:
-- the preview (inspect's "preview", outboxctl preview) builds from it the
-- request the push would send now. Organization scoped: another
-- organization's row reads as no row. The same columns as the start's,
-- with the same connection and reauthorization state; the claim token is
-- the row's current one, if any.

select o.id::text, o.organization_id::text, coalesce(o.integration_connection_id::text, ''),
    coalesce(o.command_type, ''), coalesce(o.local_entity_type, ''), coalesce(o.local_entity_id::text, ''),
    coalesce(o.payload_json::jsonb, '{}'::jsonb), coalesce(o.idempotency_key, o.id::text),
    o.attempt_count, coalesce(o.claim_token::text, ''),
    c.id is not null, coalesce(c.location_id::text, ''), coalesce(c.provider, ''),
    coalesce(c.credential_reference, ''), coalesce(c.config_json::jsonb, '{}'::jsonb),
    coalesce(cs.unauthorized_reason, case when cs.unauthorized_since is not null then 'the provider refused the connection''s grant' end, '')
from external_integration_outbox o
left join integration_connections c
    on c.id = o.integration_connection_id and c.organization_id = o.organization_id
left join integration_outbox_connection_state cs
    on cs.connection_id = c.id and cs.organization_id = c.organization_id and cs.unauthorized_since is not null
where o.id = @id::text::uuid and o.organization_id = @organization_id::text::uuid
