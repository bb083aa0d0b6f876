package credential

import "integration-outbox/internal/sqlfile"

// The statements of the OAuth2 token refresh (migration 14). Each runs on
// its own, in autocommit: no transaction stays open across a token call.

// takeLeaseSQL takes the refresh lease of a secret when nobody holds it or
// its holder's time is up, and returns the holder; no row: another holder
// has it. $1 secret ARN, $2 holder, $3 lease length in seconds.
const takeLeaseSQL = `
insert into integration_outbox_oauth_token_leases as l (secret_id, holder, expires_at, taken_at)
values ($1, $2, now() + make_interval(secs => $3::float8), now())
on conflict (secret_id) do update
    set holder = excluded.holder, expires_at = excluded.expires_at, taken_at = excluded.taken_at
    where l.expires_at <= now()
returning holder`

// leaseHeldSQL reports whether someone holds a secret's lease. $1 secret ARN.
const leaseHeldSQL = `
select exists (select 1 from integration_outbox_oauth_token_leases where secret_id = $1 and expires_at > now())`

// releaseLeaseSQL ends a lease its holder still has. $1 secret ARN, $2 holder.
const releaseLeaseSQL = `
delete from integration_outbox_oauth_token_leases where secret_id = $1 and holder = $2`

// authorizationStateSQL reads whether a connection needs reauthorization
// and the secret version that was refused. $1 connection.
const authorizationStateSQL = `
select needs_reauthorization_since is not null, coalesce(secret_version_id, '')
from integration_outbox_connection_authorization where connection_id = $1`

// markUnauthorizedSQL records that the provider refused the grant of a
// connection's secret version and opens the connection's one open
// connection_unauthorized conflict, unless it has one already, returning
// the new conflict's id (no row: one was open). $1 connection, $2
// organization, $3 credential_reference, $4 secret version, $5 last_error,
// $6 summary.
const markUnauthorizedSQL = `
with marked as (
    insert into integration_outbox_connection_authorization as a (connection_id, organization_id,
        credential_reference, needs_reauthorization_since, secret_version_id, last_error, updated_at)
    values ($1, $2, $3, now(), $4, $5, now())
    on conflict (connection_id) do update
        set needs_reauthorization_since = coalesce(a.needs_reauthorization_since, now()),
            organization_id = excluded.organization_id,
            credential_reference = excluded.credential_reference,
            secret_version_id = excluded.secret_version_id,
            last_error = excluded.last_error, updated_at = now()
    returning connection_id
)
insert into external_integration_conflicts (organization_id, location_id, integration_connection_id,
    conflict_type, severity, local_entity_type, local_entity_id, summary, local_snapshot, status)
select $2, c.location_id, m.connection_id, 'connection_unauthorized', 'high',
    'integration_connection', m.connection_id, integration_outbox_fit($6, 'external_integration_conflicts', 'summary'),
    jsonb_build_object('connectionId', m.connection_id, 'credentialReference', $3::text,
        'secretVersionId', $4::text, 'lastError', $5::text),
    'open'
from marked m
left join integration_connections c on c.id = m.connection_id and c.organization_id = $2
where not exists (
    select 1 from external_integration_conflicts x
    where x.integration_connection_id = m.connection_id and x.organization_id = $2
        and x.conflict_type = 'connection_unauthorized' and x.status = 'open')
returning id::text`

// needingReauthorizationSQL lists the connections that need
// reauthorization.
const needingReauthorizationSQL = `
select connection_id::text, organization_id::text, credential_reference, coalesce(secret_version_id, '')
from integration_outbox_connection_authorization
where needs_reauthorization_since is not null
order by connection_id`

// clearUnauthorizedSQL clears the state of a connection whose secret has a
// version other than the refused one and resolves its open
// connection_unauthorized conflicts; it returns how many it resolved. $1
// connection, $2 the secret's current version, $3 resolution_reason.
const clearUnauthorizedSQL = `
with cleared as (
    update integration_outbox_connection_authorization
    set needs_reauthorization_since = null, last_error = null, secret_version_id = $2, updated_at = now()
    where connection_id = $1 and needs_reauthorization_since is not null
        and secret_version_id is distinct from $2
    returning connection_id, organization_id
), resolved as (
    update external_integration_conflicts x
    set status = 'resolved', resolved_at = now(), resolution_reason = $3
    from cleared
    where x.integration_connection_id = cleared.connection_id and x.organization_id = cleared.organization_id
        and x.conflict_type = 'connection_unauthorized' and x.status = 'open'
    returning x.id
)
select (select count(*) from cleared), (select count(*) from resolved)`

// Statements are every statement of the package, for the schema check
// (internal/schemacheck).
func Statements() []sqlfile.Named {
	return []sqlfile.Named{
		{Name: "credential/take_lease", SQL: takeLeaseSQL},
		{Name: "credential/lease_held", SQL: leaseHeldSQL},
		{Name: "credential/release_lease", SQL: releaseLeaseSQL},
		{Name: "credential/authorization_state", SQL: authorizationStateSQL},
		{Name: "credential/mark_unauthorized", SQL: markUnauthorizedSQL},
		{Name: "credential/needing_reauthorization", SQL: needingReauthorizationSQL},
		{Name: "credential/clear_unauthorized", SQL: clearUnauthorizedSQL},
	}
}
