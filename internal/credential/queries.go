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
// connection's secret version. Its connection_unauthorized conflict is
// internal/health's (health.MarkUnauthorized, in the same transaction). $1
// connection, $2 organization, $3 credential_reference, $4 secret version,
// $5 last_error.
const markUnauthorizedSQL = `
insert into integration_outbox_connection_authorization as a (connection_id, organization_id,
    credential_reference, needs_reauthorization_since, secret_version_id, last_error, updated_at)
values ($1, $2, $3, now(), $4, $5, now())
on conflict (connection_id) do update
    set needs_reauthorization_since = coalesce(a.needs_reauthorization_since, now()),
        organization_id = excluded.organization_id,
        credential_reference = excluded.credential_reference,
        secret_version_id = excluded.secret_version_id,
        last_error = excluded.last_error, updated_at = now()`

// needingReauthorizationSQL lists the connections that need
// reauthorization.
const needingReauthorizationSQL = `
select connection_id::text, organization_id::text, credential_reference, coalesce(secret_version_id, '')
from integration_outbox_connection_authorization
where needs_reauthorization_since is not null
order by connection_id`

// clearUnauthorizedSQL clears the state of a connection whose secret has a
// version other than the refused one and returns the organization of what
// it cleared (no row: nothing to clear). Its conflict is resolved by
// health.Reauthorized in the same transaction. $1 connection, $2 the
// secret's current version.
const clearUnauthorizedSQL = `
update integration_outbox_connection_authorization
set needs_reauthorization_since = null, last_error = null, secret_version_id = $2, updated_at = now()
where connection_id = $1 and needs_reauthorization_since is not null
    and secret_version_id is distinct from $2
returning organization_id::text`

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
