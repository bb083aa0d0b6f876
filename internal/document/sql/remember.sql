-- Stores the provider's document of the local entity @entity_type
-- @entity_id through the connection @connection_id of provider @provider:
-- its id @external_id and sync token @sync_token (empty: none). The latest
-- answer wins: pushes of one entity run one at a time.

insert into integration_outbox_provider_documents as d
    (integration_connection_id, local_entity_type, local_entity_id, provider, external_id, sync_token, updated_at)
values (@connection_id::uuid, @entity_type::text, @entity_id::uuid, @provider::text, @external_id::text,
    nullif(@sync_token::text, ''), now())
on conflict (integration_connection_id, local_entity_type, local_entity_id, provider) do update
set external_id = excluded.external_id, sync_token = excluded.sync_token, updated_at = excluded.updated_at
