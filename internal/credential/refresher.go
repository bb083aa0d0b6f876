package credential

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/oauth2"

	"integration-outbox/internal/health"
)

// ErrReauthorizationNeeded marks an OAuth2 connection whose grant the
// provider refused (invalid_grant, or the client itself refused): no token
// call is made for it until its secret gets a new version (the host
// reconnected it). Its rows wait without charging attempts; the
// connection has one open connection_unauthorized conflict.
var ErrReauthorizationNeeded = errors.New("connection needs reauthorization")

// Connection is what ResolveConnection needs to know of an integration
// connection.
type Connection struct {
	ID             string
	OrganizationID string
	Provider       string          // "xero", "quickbooks", ...
	Config         json.RawMessage // config_json: its "tokenUrl" for OAuth2 secrets
	Reference      string          // credential_reference
}

// SecretWriter is the Secrets Manager call that writes a refreshed OAuth2
// secret back. *secretsmanager.Client satisfies it.
type SecretWriter interface {
	PutSecretValue(ctx context.Context, in *secretsmanager.PutSecretValueInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.PutSecretValueOutput, error)
}

// DB runs the lease and reauthorization statements (a *pgxpool.Pool).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// OAuthConfig configures the refresh of OAuth2 secrets.
type OAuthConfig struct {
	// DB holds the refresh leases and the reauthorization state
	// (migration 14). Required to refresh; nil turns OAuth2 off.
	DB DB
	// Secrets writes refreshed secrets back. Required with DB.
	Secrets SecretWriter
	// HTTPClient calls the token endpoints. It should refuse non-public
	// addresses unless AllowPrivateNetworks (the app passes
	// provider.GuardedHTTPClient). Required with DB.
	HTTPClient *http.Client
	// AllowPrivateNetworks is WEBHOOK_ALLOW_PRIVATE_NETWORKS: http token
	// URLs are accepted too.
	AllowPrivateNetworks bool
	// Events: a connection found needing reauthorization also records its
	// Connection Unauthorized event (EVENT_BUS_NAME is set).
	Events bool
	// Margin is OAUTH_REFRESH_MARGIN: an access token is refreshed at most
	// this long before it expires, and at most a tenth of its lifetime
	// (OAuthGrant.RefreshMargin; default DefaultRefreshMargin).
	Margin time.Duration
	// Lease is how long a container may hold a connection's refresh lease
	// (default 30s): a container that dies holding it blocks the
	// connection's refresh that long.
	Lease time.Duration
	// Wait bounds how long a container waits for another one's refresh
	// (default 5s); then the job is retried later.
	Wait time.Duration
	// Poll is the pause between two tries to take a held lease (default
	// 100ms).
	Poll time.Duration

	// crash, in tests, runs at each stage of a refresh (stageLeased: the
	// lease taken, nothing called yet; stageTokenAnswered: the token
	// endpoint answered, nothing written back); errContainerDied makes the
	// refresh stop right there without releasing its lease, as a container
	// that dies would.
	crash func(stage string) error
}

// Stages of a refresh, for OAuthConfig.crash.
const (
	stageLeased        = "leased"
	stageTokenAnswered = "token answered"
)

// errContainerDied stands in, in tests, for a container that dies.
var errContainerDied = errors.New("container died")

// Defaults of OAuthConfig.
const (
	DefaultOAuthLease = 30 * time.Second
	DefaultOAuthWait  = 5 * time.Second
	DefaultOAuthPoll  = 100 * time.Millisecond
)

// oauthRefresher refreshes the OAuth2 secrets of a Resolver, one container
// at a time per connection across the fleet.
type oauthRefresher struct {
	r   *Resolver
	cfg OAuthConfig
}

func newOAuthRefresher(r *Resolver, cfg OAuthConfig) (*oauthRefresher, error) {
	if cfg.Secrets == nil || cfg.HTTPClient == nil {
		return nil, errors.New("credential resolver: OAuth2 refresh needs a SecretWriter and an HTTP client")
	}
	cfg.Margin = cmp.Or(cfg.Margin, DefaultRefreshMargin)
	cfg.Lease = cmp.Or(cfg.Lease, DefaultOAuthLease)
	cfg.Wait = cmp.Or(cfg.Wait, DefaultOAuthWait)
	cfg.Poll = cmp.Or(cfg.Poll, DefaultOAuthPoll)
	return &oauthRefresher{r: r, cfg: cfg}, nil
}

// ResolveConnection is Resolve for a connection: the same scope, tenant and
// cache rules, and, for an OAuth2 secret, a Credential whose Token is an
// access token that expires more than the margin from now. A stale or
// refused token is refreshed by one container of the fleet at a time: the
// one that takes the connection's lease re-reads the secret (another may
// have refreshed it meanwhile), calls the token endpoint, writes the new set
// back with PutSecretValue and only then hands the token out; the others
// wait up to OAuthConfig.Wait and re-read. Besides Resolve's errors, it
// returns errors wrapping ErrReauthorizationNeeded (the token endpoint
// refused the grant the secret's current version still holds: hold the
// rows, charge no attempt; a grant refused after a reconnect wrote a newer
// version is not one of them, that version is used at once) and, when the
// wait ran out or the token endpoint failed, ErrUnavailable.
func (r *Resolver) ResolveConnection(ctx context.Context, c Connection) (Credential, error) {
	e, err := r.resolve(ctx, c.OrganizationID, c.Reference)
	cred := e.credential
	if err != nil || cred.OAuth == nil {
		return cred, err
	}
	if r.oauth == nil {
		return Credential{}, rejected(c.Reference, errors.New("secret holds an OAuth2 grant but this function has no OAuth2 token refresh configured"))
	}
	if r.usable(c.Reference, *cred.OAuth) {
		return r.hand(c.Reference, cred), nil
	}
	// One refresh per reference in this container; the lease covers the
	// fleet. It runs detached so that one caller giving up does not cut
	// short a refresh whose result others wait for.
	ch := r.flights.DoChan("oauth\x00"+c.Reference, func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.oauth.cfg.Wait+r.oauth.cfg.Lease)
		defer cancel()
		return r.oauth.refresh(fctx, c, e.secretID)
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return Credential{}, res.Err
		}
		return r.hand(c.Reference, res.Val.(Credential)), nil
	case <-ctx.Done():
		return Credential{}, unavailable(c.Reference, context.Cause(ctx))
	}
}

// usable reports whether g's access token may be handed out: fresh, and not
// the one Invalidate was called after.
func (r *Resolver) usable(reference string, g OAuthGrant) bool {
	if !g.fresh(r.now(), r.oauth.cfg.Margin) {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused[reference] != g.AccessToken.value
}

// hand returns cred with its access token as Token, remembering it for
// Invalidate.
func (r *Resolver) hand(reference string, cred Credential) Credential {
	cred.Token = cred.OAuth.AccessToken
	r.mu.Lock()
	r.handed[reference] = cred.Token.value
	r.mu.Unlock()
	return cred
}

// reread fetches reference's secret again (Describe + GetSecretValue
// AWSCURRENT), checking the tenant as Resolve does.
func (r *Resolver) reread(ctx context.Context, c Connection) (cacheEntry, error) {
	e, err := r.load(ctx, c.Reference)
	if err != nil {
		return cacheEntry{}, err
	}
	if why := r.refusal(e, c.OrganizationID); why != "" {
		return cacheEntry{}, rejected(c.Reference, errors.New(why))
	}
	if e.credential.OAuth == nil {
		return cacheEntry{}, rejected(c.Reference, errors.New("secret no longer holds an OAuth2 grant"))
	}
	return e, nil
}

// refresh makes c's access token fresh, one container of the fleet at a
// time. No transaction is open across the token call: the lease is a row
// taken and released by single statements. The lease is the secret's
// (secretID, its ARN): connections that share a secret share its refresh
// token, so they must take turns too.
func (o *oauthRefresher) refresh(ctx context.Context, c Connection, secretID string) (Credential, error) {
	r := o.r
	endpoint, err := tokenURL(c.Provider, c.Config, o.cfg.AllowPrivateNetworks)
	if err != nil {
		return Credential{}, rejected(c.Reference, err)
	}
	if err := o.checkAuthorized(ctx, c); err != nil {
		return Credential{}, err
	}

	holder := rand.Text()
	waitUntil := time.Now().Add(o.cfg.Wait)
	for {
		var got string
		err := o.cfg.DB.QueryRow(ctx, takeLeaseSQL, secretID, holder, o.cfg.Lease.Seconds()).Scan(&got)
		if err == nil {
			break
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return Credential{}, unavailable(c.Reference, fmt.Errorf("taking the token refresh lease: %w", err))
		}
		if time.Now().After(waitUntil) {
			return Credential{}, unavailable(c.Reference, fmt.Errorf("another container has been refreshing the OAuth2 token for over %s", o.cfg.Wait))
		}
		select {
		case <-time.After(o.cfg.Poll):
		case <-ctx.Done():
			return Credential{}, unavailable(c.Reference, context.Cause(ctx))
		}
		// Once the holder let go, what it wrote back is read by every
		// waiting container at once, without taking the lease in turn.
		var held bool
		if err := o.cfg.DB.QueryRow(ctx, leaseHeldSQL, secretID).Scan(&held); err == nil && !held {
			if cur, err := r.reread(ctx, c); err == nil && r.usable(c.Reference, *cur.credential.OAuth) {
				return cur.credential, nil
			}
		}
	}
	release := true
	defer func() {
		if release {
			// Detached: a lease left behind only delays the next refresh
			// until it expires.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if _, err := o.cfg.DB.Exec(rctx, releaseLeaseSQL, secretID, holder); err != nil {
				r.log.WarnContext(ctx, "could not release the OAuth2 token refresh lease; it expires by itself",
					"connectionId", c.ID, "error", err.Error())
			}
		}
	}()

	// The lease is ours for o.cfg.Lease: what we do under it must end
	// before another container may take it and present the same refresh
	// token.
	ctx, cancel := context.WithTimeout(ctx, o.cfg.Lease)
	defer cancel()
	if o.died(stageLeased) {
		release = false
		return Credential{}, unavailable(c.Reference, errContainerDied)
	}

	// Another container may have refreshed while we waited for the lease.
	cur, err := r.reread(ctx, c)
	if err != nil {
		return Credential{}, err
	}
	if r.usable(c.Reference, *cur.credential.OAuth) {
		return cur.credential, nil
	}

	// A refused grant is not concluded on the version read above: a
	// reconnect may have written a new one since. The secret's
	// current version is read once per refusal; a newer grant is taken, at
	// most once, and only the grant the secret still holds makes the
	// connection need reauthorization.
	var tok *oauth2.Token
	for retried := false; ; retried = true {
		if tok, err = o.exchange(ctx, endpoint, *cur.credential.OAuth); err == nil {
			break
		}
		var rerr *oauth2.RetrieveError
		if !errors.As(err, &rerr) || !refusesGrant(rerr.ErrorCode) {
			return Credential{}, unavailable(c.Reference, fmt.Errorf("refreshing the OAuth2 token at %s: %w", endpoint, tokenError(err)))
		}
		next, err := o.refused(ctx, c, cur, rerr)
		if err != nil {
			return Credential{}, err
		}
		if retried {
			return Credential{}, unavailable(c.Reference, fmt.Errorf(
				"the token endpoint refused the OAuth2 grant of secret version %s (%s), which a new version replaced again since; trying later",
				cur.versionID, tokenError(rerr)))
		}
		r.log.InfoContext(ctx, "OAuth2 grant refused, but the secret has a newer version (the connection was reconnected): using it",
			"connectionId", c.ID, "organizationId", c.OrganizationID, "reference", c.Reference,
			"refusedVersion", cur.versionID, "currentVersion", next.versionID, "error", tokenError(rerr).Error())
		// A sibling may have recorded the refusal of the old version
		// meanwhile: the new one ends that hold now rather than at the
		// next dispatch run.
		if _, _, err := o.clear(ctx, c.OrganizationID, c.ID, next.versionID); err != nil {
			r.log.WarnContext(ctx, "could not clear the reauthorization state of a reconnected connection; the next dispatch run does",
				"connectionId", c.ID, "error", err.Error())
		}
		cur = next
		if r.usable(c.Reference, *cur.credential.OAuth) {
			return cur.credential, nil
		}
	}
	if o.died(stageTokenAnswered) {
		release = false
		return Credential{}, unavailable(c.Reference, errContainerDied)
	}

	g := *cur.credential.OAuth
	if tok.RefreshToken != "" {
		g.RefreshToken = NewSecret(tok.RefreshToken)
	}
	g.AccessToken = NewSecret(tok.AccessToken)
	g.AccessTokenIssuedAt = r.now().Truncate(time.Second)
	g.AccessTokenExpiresAt = o.expiry(tok)
	versionID, err := o.writeBack(ctx, cur.secretID, g)
	if err != nil {
		return Credential{}, unavailable(c.Reference, fmt.Errorf("writing the refreshed OAuth2 token back: %w", err))
	}
	cur.credential = Credential{OAuth: &g}
	cur.versionID = versionID
	r.mu.Lock()
	epoch := r.epoch
	r.mu.Unlock()
	r.store(c.Reference, cur, epoch)
	r.log.InfoContext(ctx, "OAuth2 access token refreshed and written back", "connectionId", c.ID,
		"organizationId", c.OrganizationID, "reference", c.Reference, "expiresAt", g.AccessTokenExpiresAt)
	return cur.credential, nil
}

// refused is what the token endpoint refusing cur's grant (rerr) means. It
// reads the secret's current version once, past the cache (and caches it):
// when that version holds another grant (a reconnect wrote it after cur was
// read, or replaced the client's secret), it returns it and records
// nothing. When the current version still holds the refused grant, it
// records that the connection needs reauthorization and returns the
// ErrReauthorizationNeeded error. A secret that can no longer serve the
// connection returns Resolve's ErrRejected; one that cannot be read
// (ErrUnavailable) records the refusal of cur's version, as the refusal
// cannot be presented again usefully: a newer version, if there is one,
// ends the hold at the next dispatch run (CheckReauthorized).
func (o *oauthRefresher) refused(ctx context.Context, c Connection, cur cacheEntry, rerr *oauth2.RetrieveError) (cacheEntry, error) {
	next, err := o.r.reread(ctx, c)
	switch {
	case errors.Is(err, ErrRejected):
		return cacheEntry{}, err
	case err != nil:
		o.r.log.WarnContext(ctx, "OAuth2 grant refused and the secret could not be read again to look for a newer version",
			"connectionId", c.ID, "reference", c.Reference, "error", err.Error())
		return cacheEntry{}, o.markUnauthorized(ctx, c, cur.versionID, rerr)
	case sameGrant(*next.credential.OAuth, *cur.credential.OAuth):
		return cacheEntry{}, o.markUnauthorized(ctx, c, next.versionID, rerr)
	}
	return next, nil
}

// sameGrant reports whether a and b present the same grant to the token
// endpoint: the same client and refresh token.
func sameGrant(a, b OAuthGrant) bool {
	return a.ClientID == b.ClientID && a.ClientSecret.value == b.ClientSecret.value &&
		a.RefreshToken.value == b.RefreshToken.value
}

// died reports whether a test has the container die at stage.
func (o *oauthRefresher) died(stage string) bool {
	return o.cfg.crash != nil && errors.Is(o.cfg.crash(stage), errContainerDied)
}

// exchange calls the token endpoint with g's refresh token
// (client_secret_basic, as Xero and Intuit take it) through the guarded
// client.
func (o *oauthRefresher) exchange(ctx context.Context, endpoint string, g OAuthGrant) (*oauth2.Token, error) {
	cfg := oauth2.Config{ClientID: g.ClientID, ClientSecret: g.ClientSecret.value,
		Endpoint: oauth2.Endpoint{TokenURL: endpoint, AuthStyle: oauth2.AuthStyleInHeader}}
	ctx = context.WithValue(ctx, oauth2.HTTPClient, o.cfg.HTTPClient)
	return cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: g.RefreshToken.value}).Token()
}

// expiry is when tok expires by our clock: expires_in from now; when the
// endpoint gave none, a conservative 10 minutes.
func (o *oauthRefresher) expiry(tok *oauth2.Token) time.Time {
	now := o.r.now()
	switch {
	case tok.ExpiresIn > 0:
		return now.Add(time.Duration(tok.ExpiresIn) * time.Second).Truncate(time.Second)
	case !tok.Expiry.IsZero():
		return tok.Expiry.Truncate(time.Second)
	}
	return now.Add(10 * time.Minute).Truncate(time.Second)
}

// writeBack stores g as the secret's new AWSCURRENT version, trying three
// times with the same ClientRequestToken (a retry of a write that did land
// creates no second version), and returns the new VersionId.
func (o *oauthRefresher) writeBack(ctx context.Context, secretID string, g OAuthGrant) (string, error) {
	in := &secretsmanager.PutSecretValueInput{SecretId: aws.String(secretID),
		SecretString: aws.String(g.secretString()), ClientRequestToken: aws.String(clientRequestToken(secretID, g))}
	var err error
	for attempt := range 3 {
		var out *secretsmanager.PutSecretValueOutput
		if out, err = o.cfg.Secrets.PutSecretValue(ctx, in); err == nil {
			return aws.ToString(out.VersionId), nil
		}
		select {
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		case <-ctx.Done():
			return "", err
		}
	}
	return "", err
}

// refusesGrant reports whether a token endpoint error code says the
// secret's grant or client is refused, which only the host reconnecting
// can fix.
func refusesGrant(code string) bool {
	switch code {
	case "invalid_grant", "invalid_client", "unauthorized_client":
		return true
	}
	return false
}

// tokenError drops the response body a RetrieveError quotes (it may echo
// what was sent), keeping the status and the RFC 6749 error fields.
func tokenError(err error) error {
	var rerr *oauth2.RetrieveError
	if !errors.As(err, &rerr) {
		return err
	}
	status := 0
	if rerr.Response != nil {
		status = rerr.Response.StatusCode
	}
	return fmt.Errorf("token endpoint answered %d %s: %s", status, cmp.Or(rerr.ErrorCode, "(no error code)"), rerr.ErrorDescription)
}

// checkAuthorized returns ErrReauthorizationNeeded when c needs
// reauthorization and its secret still has the refused version; when the
// version changed, it clears the state (as CheckReauthorized does) and
// lets the refresh go on.
func (o *oauthRefresher) checkAuthorized(ctx context.Context, c Connection) error {
	var needs bool
	var refused string
	err := o.cfg.DB.QueryRow(ctx, authorizationStateSQL, c.ID).Scan(&needs, &refused)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && !needs {
		return nil
	}
	if err != nil {
		return unavailable(c.Reference, fmt.Errorf("reading the connection's authorization state: %w", err))
	}
	cur, err := o.r.reread(ctx, c)
	if err != nil {
		return err
	}
	if cur.versionID == refused {
		return fmt.Errorf("resolving credential_reference %q: the provider refused the OAuth2 grant of this secret version; reconnect the connection to write a new one: %w",
			clip(c.Reference), ErrReauthorizationNeeded)
	}
	_, _, err = o.clear(ctx, c.OrganizationID, c.ID, cur.versionID)
	return err
}

// markUnauthorized records that the token endpoint refused the grant of
// versionID and opens the connection's conflict, and returns the
// ErrReauthorizationNeeded error.
func (o *oauthRefresher) markUnauthorized(ctx context.Context, c Connection, versionID string, rerr *oauth2.RetrieveError) error {
	why := tokenError(rerr).Error()
	if err := o.recordUnauthorized(ctx, c, versionID, why, cmp.Or(rerr.ErrorCode, "refused")); err != nil {
		return err
	}
	return fmt.Errorf("resolving credential_reference %q: %s: %w", clip(c.Reference), why, ErrReauthorizationNeeded)
}

// recordUnauthorized records that the provider refused the grant of c's
// secret version versionID (why: its answer; code: a word for the summary)
// and opens the connection's one connection_unauthorized conflict.
func (o *oauthRefresher) recordUnauthorized(ctx context.Context, c Connection, versionID, why, code string) error {
	// Detached from the lease's end: the refusal must be recorded, or the
	// next container would present the refused grant again.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// One transaction: the refused secret version, and the connection's
	// health (internal/health, the one owner of its connection_unauthorized
	// conflict): its hold, its conflict and its Connection Unauthorized
	// event.
	err := pgx.BeginFunc(mctx, o.cfg.DB, func(tx pgx.Tx) error {
		if _, err := tx.Exec(mctx, markUnauthorizedSQL, c.ID, c.OrganizationID, c.Reference, versionID, why); err != nil {
			return err
		}
		_, err := health.MarkUnauthorized(mctx, tx, health.Unauthorized{OrganizationID: c.OrganizationID,
			ConnectionID: c.ID, Reason: fmt.Sprintf("the provider refused its authorization (%s): %s", code, why), Events: o.cfg.Events})
		return err
	})
	if err != nil {
		return unavailable(c.Reference, fmt.Errorf("recording that the connection needs reauthorization (%s): %w", why, err))
	}
	o.r.log.WarnContext(ctx, "OAuth2 grant refused: the connection needs reauthorization", "connectionId", c.ID,
		"organizationId", c.OrganizationID, "reference", c.Reference, "error", why)
	return nil
}

// NeedsReauthorization records that the provider refused c's grant in a
// call (a 403 saying the tenant is disconnected, after a fresh token was
// tried), as a refused refresh does: no more token calls for it, its rows
// held, one open connection_unauthorized conflict, until the host writes a
// new version of the secret. It reports whether it recorded it: a
// credential that is not an OAuth2 grant (or a resolver without OAuth2) has
// nothing to reconnect, and records nothing.
func (r *Resolver) NeedsReauthorization(ctx context.Context, c Connection, why string) (bool, error) {
	if r.oauth == nil {
		return false, nil
	}
	cur, err := r.reread(ctx, c)
	if errors.Is(err, ErrRejected) {
		return false, nil // not an OAuth2 grant (or not this tenant's): nothing to reconnect
	}
	if err != nil {
		return false, err
	}
	if cur.credential.OAuth == nil {
		return false, nil
	}
	if err := r.oauth.recordUnauthorized(ctx, c, cur.versionID, why, "403"); err != nil {
		return false, err
	}
	return true, nil
}

// clear clears c's state when versionID differs from the refused one and
// has internal/health end its hold and resolve its conflict (its rows are
// claimed again; Connection Recovered follows its first delivery), in one
// transaction.
func (o *oauthRefresher) clear(ctx context.Context, organizationID, connectionID, versionID string) (cleared, resolved int64, err error) {
	err = pgx.BeginFunc(ctx, o.cfg.DB, func(tx pgx.Tx) error {
		var org string
		err := tx.QueryRow(ctx, clearUnauthorizedSQL, connectionID, versionID).Scan(&org)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		cleared = 1
		_, resolved, _, err = health.Reauthorized(ctx, tx, organizationID, connectionID, ReconnectedReason)
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("clearing the reauthorization state of connection %s: %w", connectionID, err)
	}
	return cleared, resolved, nil
}

// ReconnectedReason is the resolution_reason of the connection_unauthorized
// conflict of a connection the host reconnected.
const ReconnectedReason = "The connection was reconnected: its secret has a new version."

// CheckReauthorized resumes the connections that need reauthorization and
// whose secret has a new AWSCURRENT version (the host reconnected them): it
// clears their state and resolves their connection_unauthorized conflicts.
// It returns how many connections it resumed. Secrets it cannot describe
// are logged and skipped. The dispatcher calls it once per run.
func (r *Resolver) CheckReauthorized(ctx context.Context) (int, error) {
	if r.oauth == nil {
		return 0, nil
	}
	rows, err := r.oauth.cfg.DB.Query(ctx, needingReauthorizationSQL)
	if err != nil {
		return 0, fmt.Errorf("listing connections needing reauthorization: %w", err)
	}
	type waiting struct{ connectionID, organizationID, reference, versionID string }
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (waiting, error) {
		var w waiting
		err := row.Scan(&w.connectionID, &w.organizationID, &w.reference, &w.versionID)
		return w, err
	})
	if err != nil {
		return 0, fmt.Errorf("listing connections needing reauthorization: %w", err)
	}
	resumed := 0
	for _, w := range list {
		desc, err := r.api.DescribeSecret(ctx, &secretsmanager.DescribeSecretInput{SecretId: aws.String(w.reference)})
		if err != nil {
			r.log.WarnContext(ctx, "could not check whether a connection was reconnected", "connectionId", w.connectionID,
				"organizationId", w.organizationID, "reference", w.reference, "error", err.Error())
			continue
		}
		current := ""
		for id, stages := range desc.VersionIdsToStages {
			for _, s := range stages {
				if s == "AWSCURRENT" {
					current = id
				}
			}
		}
		if current == "" || current == w.versionID {
			continue
		}
		cleared, resolved, err := r.oauth.clear(ctx, w.organizationID, w.connectionID, current)
		if err != nil {
			return resumed, err
		}
		if cleared > 0 {
			resumed++
			r.log.InfoContext(ctx, "connection reconnected: its commands resume", "connectionId", w.connectionID,
				"organizationId", w.organizationID, "conflictsResolved", resolved)
		}
	}
	return resumed, nil
}
