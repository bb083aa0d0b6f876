-- OAuth2 connections (xero, quickbooks): the lease that lets one container
-- of the fleet at a time refresh a secret's access token, and the
-- connections whose grant the provider refused (they need the host to
-- reconnect them).

-- +goose Up
-- This file touches only our own tables; a lock it cannot get within the
-- timeout is another session's: the run fails and can be repeated.
set local lock_timeout = '5s';

-- One row per OAuth2 secret (its ARN) whose tokens a container is
-- refreshing: keyed by the secret, not the connection, since connections
-- that share a secret share its refresh token. The holder may call the
-- token endpoint until expires_at; no transaction stays open meanwhile. A
-- row whose expires_at has passed is free: its holder died, or could not
-- release it.
create table if not exists integration_outbox_oauth_token_leases (
    secret_id text primary key,
    holder text not null,
    expires_at timestamptz not null,
    taken_at timestamptz not null default now()
);

-- One row per OAuth2 connection whose grant the provider refused once (a
-- few rows: the dispatcher's check reads them all, no index needed).
-- needs_reauthorization_since null: authorized. secret_version_id is the
-- secret version that was refused: a new version (the host reconnected)
-- clears the state.
create table if not exists integration_outbox_connection_authorization (
    connection_id uuid primary key,
    organization_id uuid not null,
    credential_reference text not null,
    needs_reauthorization_since timestamptz,
    secret_version_id text,
    last_error text,
    updated_at timestamptz not null default now()
);

-- +goose Down
set local lock_timeout = '5s';
drop table if exists integration_outbox_connection_authorization;
drop table if exists integration_outbox_oauth_token_leases;
