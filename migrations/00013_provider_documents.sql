-- The accounting providers' documents: which Xero or QuickBooks purchase
-- order a push created for one local entity through one connection, so that
-- a later push of the same entity updates that document instead of creating
-- another. A table of ours (nothing is added to the host's tables): the push
-- function reads it with the entity and writes it after each successful
-- call (internal/purchaseorder).

-- +goose Up
-- This file touches only our own table; a lock it cannot get within the
-- timeout is another session's: the run fails and can be repeated.
set local lock_timeout = '5s';

-- sync_token is the document's version where the provider needs it for an
-- update (QuickBooks' SyncToken); null otherwise.
create table if not exists integration_outbox_provider_documents (
    integration_connection_id uuid not null,
    local_entity_type text not null,
    local_entity_id uuid not null,
    provider text not null,
    external_id text not null,
    sync_token text,
    updated_at timestamptz not null default now(),
    primary key (integration_connection_id, local_entity_type, local_entity_id, provider)
);

-- +goose Down
set local lock_timeout = '5s';
drop table if exists integration_outbox_provider_documents;
