package credential

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"golang.org/x/oauth2"

	"integration-outbox/internal/testenv"
)

// countingWriter counts the write-backs that reach Secrets Manager.
type countingWriter struct {
	SecretWriter
	puts atomic.Int64
}

func (c *countingWriter) PutSecretValue(ctx context.Context, in *secretsmanager.PutSecretValueInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.PutSecretValueOutput, error) {
	c.puts.Add(1)
	return c.SecretWriter.PutSecretValue(ctx, in, optFns...)
}

// scaledClock runs speed times faster than the wall clock from its start:
// the access token lifetimes the server announces (expires_in) pass that
// much faster for the resolvers, while the server keeps its own real clock
// (its tokens stay valid longer than the resolvers believe).
type scaledClock struct {
	start time.Time
	speed time.Duration
}

func (c scaledClock) Now() time.Time { return c.start.Add(time.Since(c.start) * c.speed) }

// oauthFixture is one OAuth2 connection: a fosite server, its secret in
// moto, its row in a migrated database.
type oauthFixture struct {
	server oauthServer
	db     *testenv.Fixture
	conn   Connection
	arn    string
	writes *countingWriter
	sm     *secretsmanager.Client
}

// oauthServer is a real authorization server the tests run: fosite in
// process (authServer) or Ory Hydra (hydraServer).
type oauthServer interface {
	// TokenURL is where connections refresh their tokens.
	TokenURL() string
	// connect runs the authorization code flow, as the back office does.
	connect(t *testing.T) *oauth2.Token
	// active reports whether the server accepts an access token.
	active(accessToken string) bool
	// refreshable reports whether the server honours a refresh token (it
	// spends it).
	refreshable(refreshToken string) bool
	clientCredentials() (id, secret string)
	// refreshCount counts refresh_token grant requests, refusedCount those
	// refused with invalid_grant.
	refreshCount() int64
	refusedCount() int64
}

func setupOAuth(t *testing.T, server oauthServer) *oauthFixture {
	t.Helper()
	f := &oauthFixture{server: server, db: servers.Postgres(t).NewDB(t), sm: newClient(motoURL)}
	f.writes = &countingWriter{SecretWriter: f.sm}
	org := f.db.NewID(t)
	tok := f.server.connect(t)
	name, arn := testenv.CreateSecret(t, f.sm, testenv.SecretName(t, ""), oauthSecret(f.server, tok), org)
	f.arn = arn
	cfg := json.RawMessage(fmt.Sprintf(`{"tenantId":"tenant-1","tokenUrl":%q}`, f.server.TokenURL()))
	id := f.db.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "xero", CredentialReference: name, Config: json.RawMessage(cfg)})
	f.conn = Connection{ID: id, OrganizationID: org, Provider: "xero", Config: cfg, Reference: name}
	return f
}

// oauthSecret is the secret the back office writes after the consent flow.
func oauthSecret(a oauthServer, tok *oauth2.Token) string {
	id, secret := a.clientCredentials()
	g := OAuthGrant{ClientID: id, ClientSecret: NewSecret(secret), RefreshToken: NewSecret(tok.RefreshToken),
		AccessToken: NewSecret(tok.AccessToken), AccessTokenExpiresAt: tok.Expiry}
	return g.secretString()
}

// container is one Lambda container's resolver: its own cache, database
// pool, HTTP client and Secrets Manager client.
func (f *oauthFixture) container(t *testing.T, clock func() time.Time, cfg OAuthConfig) *Resolver {
	t.Helper()
	return f.containerWith(t, newClient(motoURL), clock, cfg)
}

// containerWith is container reading Secrets Manager through api.
func (f *oauthFixture) containerWith(t *testing.T, api SecretsAPI, clock func() time.Time, cfg OAuthConfig) *Resolver {
	t.Helper()
	transport := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(transport.CloseIdleConnections)
	cfg.DB = testenv.OpenPool(t, f.db.URL, nil)
	cfg.Secrets = f.writes
	cfg.HTTPClient = &http.Client{Transport: transport, Timeout: 10 * time.Second}
	cfg.AllowPrivateNetworks = true // the fosite server listens on loopback
	r, err := NewResolver(api, ResolverConfig{Region: testRegion, Clock: clock, OAuth: cfg,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// storedGrant reads the connection's secret as it is now.
func (f *oauthFixture) storedGrant(t *testing.T) (OAuthGrant, string) {
	t.Helper()
	out, err := f.sm.GetSecretValue(context.Background(), &secretsmanager.GetSecretValueInput{
		SecretId: aws.String(f.arn), VersionStage: aws.String("AWSCURRENT")})
	if err != nil {
		t.Fatal(err)
	}
	c, err := parseCredential(aws.ToString(out.SecretString))
	if err != nil || c.OAuth == nil {
		t.Fatalf("stored secret: %v", err)
	}
	return *c.OAuth, aws.ToString(out.VersionId)
}

// dyingContainer is a container that dies at stage of its next refresh.
func (f *oauthFixture) dyingContainer(t *testing.T, stage string) *Resolver {
	t.Helper()
	return f.container(t, nil, OAuthConfig{Lease: time.Second, Wait: 3 * time.Second,
		crash: func(s string) error {
			if s == stage {
				return errContainerDied
			}
			return nil
		}})
}

// crashAfterTokenCall makes the stored access token stale and has a
// container refresh it and die before the write-back; it returns another
// container (1 s lease, 3 s wait), whose next resolve waits for the dead
// one's lease to expire.
func (f *oauthFixture) crashAfterTokenCall(t *testing.T) *Resolver {
	t.Helper()
	ctx := context.Background()
	g, _ := f.storedGrant(t)
	g.AccessTokenExpiresAt = time.Now().Add(-time.Minute).Truncate(time.Second)
	if _, err := f.sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{
		SecretId: aws.String(f.arn), SecretString: aws.String(g.secretString())}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.dyingContainer(t, stageTokenAnswered).ResolveConnection(ctx, f.conn); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("dying container: err = %v, want ErrUnavailable", err)
	}
	if n := f.server.refreshCount(); n != 1 {
		t.Fatalf("%d refreshes before the crash, want 1", n)
	}
	return f.container(t, nil, OAuthConfig{Lease: time.Second, Wait: 3 * time.Second})
}

// TestOAuthFleetRefreshesOneAtATime: four containers deliver 300 commands
// of one connection, in bursts of four, over 140 simulated seconds (35 s of wall clock at 4×)
// while its access token lives 20 simulated seconds, less than the default
// refresh margin (2 minutes): the margin shrinks to a tenth of the
// lifetime, so the token is refreshed once per life and not on every
// call (what a fixed 2-minute margin did). Each command resolves
// the credential and has the server introspect the access token; a token
// the server no longer accepts (fosite revokes a grant's access tokens on
// each refresh) is invalidated and resolved once more, as the push worker
// does after a 401. The server must never see a spent refresh token (its
// reuse detection would revoke the grant), refresh at most once per
// lifetime, and each refresh must be written back once.
func TestOAuthFleetRefreshesOneAtATime(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 35 s of wall clock")
	}
	const (
		containers = 4
		commands   = 300
		wall       = 35 * time.Second
		speed      = 4
		lifetime   = 20 * time.Second // simulated, as announced by expires_in
	)
	f := setupOAuth(t, newAuthServer(t, lifetime)) // the server's own lifetime, by its real clock
	clock := scaledClock{start: time.Now(), speed: speed}
	// The consent flow's token was stamped by the real clock; restamp it
	// by the scaled one so that its first refresh is due after a lifetime.
	g, _ := f.storedGrant(t)
	g.AccessTokenIssuedAt = clock.Now().Truncate(time.Second)
	g.AccessTokenExpiresAt = g.AccessTokenIssuedAt.Add(lifetime)
	if _, err := f.sm.PutSecretValue(context.Background(), &secretsmanager.PutSecretValueInput{
		SecretId: aws.String(f.arn), SecretString: aws.String(g.secretString())}); err != nil {
		t.Fatal(err)
	}
	fleet := make([]*Resolver, containers)
	for i := range fleet {
		fleet[i] = f.container(t, clock.Now, OAuthConfig{}) // the default margin, longer than the lifetime
	}

	// Commands come in bursts, one per container, so that the containers
	// resolve at the same moments.
	work := make(chan int, containers)
	go func() {
		defer close(work)
		tick := time.NewTicker(wall / (commands / containers))
		defer tick.Stop()
		for i := range commands {
			if i%containers == 0 {
				<-tick.C
			}
			work <- i
		}
	}()
	var (
		done           [commands]atomic.Int64
		secondResolves atomic.Int64
		failures       = make(chan error, commands)
		wg             sync.WaitGroup
		ctx            = context.Background()
		firstSimulated = clock.Now()
	)
	for _, r := range fleet {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				cred, err := r.ResolveConnection(ctx, f.conn)
				if err == nil && !f.server.active(cred.Token.Reveal()) {
					secondResolves.Add(1)
					r.Invalidate(f.conn.Reference)
					cred, err = r.ResolveConnection(ctx, f.conn)
				}
				switch {
				case err != nil:
					failures <- fmt.Errorf("command %d: %w", i, err)
				case !f.server.active(cred.Token.Reveal()):
					failures <- fmt.Errorf("command %d: the server refuses the access token resolved after an invalidation", i)
				default:
					done[i].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Error(err)
	}
	simulated := clock.Now().Sub(firstSimulated)
	refreshes, writes := f.server.refreshCount(), f.writes.puts.Load()
	t.Logf("%d commands over %s simulated: %d token refreshes, %d write-backs, %d second resolves after a refused token",
		commands, simulated.Round(time.Second), refreshes, writes, secondResolves.Load())

	for i := range done {
		if n := done[i].Load(); n != 1 {
			t.Errorf("command %d done %d times, want once", i, n)
		}
	}
	if n := f.server.refusedCount(); n != 0 {
		t.Errorf("the server refused %d refresh tokens: a spent one was presented and the grant revoked", n)
	}
	// A token is used until a tenth of its life is left: one refresh per
	// nine tenths of a lifetime, the first one's included.
	if limit := int64(simulated/(lifetime-lifetime/RefreshMarginFraction)) + 1; refreshes > limit || refreshes == 0 {
		t.Errorf("%d token refreshes in %s with a %s lifetime, want 1 to %d", refreshes, simulated, lifetime, limit)
	}
	if writes != refreshes {
		t.Errorf("%d write-backs for %d refreshes, want one each", writes, refreshes)
	}
	stored, _ := f.storedGrant(t)
	if !f.server.refreshable(stored.RefreshToken.Reveal()) {
		t.Error("the server refuses the stored refresh token: the grant was revoked")
	}
}

// TestOAuthContainerDiesBeforeWriteBack: a container gets new tokens from
// the server and dies before writing them back. fosite, like any server
// without a grace period for a spent refresh token, revokes the grant when
// the next container presents the refresh token still stored: the
// connection then needs reauthorization, with one open conflict, and no
// further token call is made for it. Once the host reconnects (a new secret
// version), CheckReauthorized clears the state and resolves the conflict,
// and the connection resolves again.
func TestOAuthContainerDiesBeforeWriteBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setupOAuth(t, newAuthServer(t, time.Hour))
	a := f.dyingContainer(t, stageTokenAnswered)
	b := f.crashAfterTokenCall(t)
	c := f.container(t, nil, OAuthConfig{Lease: time.Second, Wait: 3 * time.Second})
	// b waits for a's lease to expire, re-reads the spent refresh token and
	// presents it: the server revokes the grant.
	_, err := b.ResolveConnection(ctx, f.conn)
	if !errors.Is(err, ErrReauthorizationNeeded) {
		t.Fatalf("after the crash: err = %v, want ErrReauthorizationNeeded", err)
	}
	if errors.Is(err, ErrRejected) || errors.Is(err, ErrUnavailable) {
		t.Errorf("err = %v is also ErrRejected or ErrUnavailable", err)
	}
	if n := f.server.refusedCount(); n != 1 {
		t.Errorf("the server refused %d refresh tokens, want 1", n)
	}
	conflicts := func(status string) int {
		return f.db.Count(t, `select count(*) from external_integration_conflicts
			where integration_connection_id = $1 and conflict_type = 'connection_unauthorized' and status = $2`, f.conn.ID, status)
	}
	// Other containers, and b again: no token call, the same error, still
	// one conflict.
	for _, r := range []*Resolver{c, b, a} {
		if _, err := r.ResolveConnection(ctx, f.conn); !errors.Is(err, ErrReauthorizationNeeded) {
			t.Errorf("later resolve: err = %v, want ErrReauthorizationNeeded", err)
		}
	}
	if n := f.server.refreshCount(); n != 2 {
		t.Errorf("%d refreshes, want 2: none once the connection needs reauthorization", n)
	}
	if n := conflicts("open"); n != 1 {
		t.Errorf("%d open connection_unauthorized conflicts, want 1", n)
	}
	var summary string
	if err := f.db.Pool.QueryRow(ctx, `select summary from external_integration_conflicts
		where integration_connection_id = $1 and conflict_type = 'connection_unauthorized'`, f.conn.ID).Scan(&summary); err != nil {
		t.Fatal(err)
	}
	t.Logf("conflict summary: %s", summary)
	if n, err := c.CheckReauthorized(ctx); err != nil || n != 0 {
		t.Errorf("CheckReauthorized before reconnecting = %d, %v; want 0", n, err)
	}

	// The host reconnects: a new consent, a new secret version.
	tok := f.server.connect(t)
	if _, err := f.sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{
		SecretId: aws.String(f.arn), SecretString: aws.String(oauthSecret(f.server, tok))}); err != nil {
		t.Fatal(err)
	}
	if n, err := c.CheckReauthorized(ctx); err != nil || n != 1 {
		t.Fatalf("CheckReauthorized after reconnecting = %d, %v; want 1", n, err)
	}
	if n := conflicts("open"); n != 0 {
		t.Errorf("%d open conflicts after reconnecting, want 0", n)
	}
	if n := f.db.Count(t, `select count(*) from external_integration_conflicts where integration_connection_id = $1
		and status = 'resolved' and resolved_at is not null and resolution_reason <> ''`, f.conn.ID); n != 1 {
		t.Errorf("%d resolved conflicts with a reason, want 1", n)
	}
	if n := f.db.Count(t, `select count(*) from integration_outbox_connection_authorization
		where connection_id = $1 and needs_reauthorization_since is null`, f.conn.ID); n != 1 {
		t.Errorf("the connection still needs reauthorization")
	}
	if n, err := c.CheckReauthorized(ctx); err != nil || n != 0 {
		t.Errorf("CheckReauthorized again = %d, %v; want 0", n, err)
	}
	// b's cache still holds the refused secret for its TTL: Invalidate, as
	// the worker does after a 401, or wait for the cache to expire.
	b.Invalidate(f.conn.Reference)
	for _, r := range []*Resolver{b, c} {
		cred, err := r.ResolveConnection(ctx, f.conn)
		if err != nil || !f.server.active(cred.Token.Reveal()) {
			t.Errorf("after reconnecting: err = %v, or the server refuses the token", err)
		}
	}
}

// TestOAuthContainerDiesHoldingTheLease: a container dies after taking the
// lease, before any token call. The others wait for the lease to expire,
// then one of them refreshes with the stored refresh token, which the
// server never saw spent: no reauthorization, one refresh, one write-back.
func TestOAuthContainerDiesHoldingTheLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setupOAuth(t, newAuthServer(t, time.Hour))
	g, _ := f.storedGrant(t)
	g.AccessTokenExpiresAt = time.Now().Add(-time.Minute).Truncate(time.Second)
	if _, err := f.sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{
		SecretId: aws.String(f.arn), SecretString: aws.String(g.secretString())}); err != nil {
		t.Fatal(err)
	}
	cfg := OAuthConfig{Lease: time.Second, Wait: 3 * time.Second}
	dying := cfg
	dying.crash = func(stage string) error {
		if stage == stageLeased {
			return errContainerDied
		}
		return nil
	}
	a := f.container(t, nil, dying)
	if _, err := a.ResolveConnection(ctx, f.conn); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("dying container: err = %v, want ErrUnavailable", err)
	}
	puts := f.writes.puts.Load()
	var wg sync.WaitGroup
	for range 3 {
		r := f.container(t, nil, cfg)
		wg.Add(1)
		go func() {
			defer wg.Done()
			cred, err := r.ResolveConnection(ctx, f.conn)
			if err != nil || !f.server.active(cred.Token.Reveal()) {
				t.Errorf("after the lease expired: err = %v, or the server refuses the token", err)
			}
		}()
	}
	wg.Wait()
	if n := f.server.refreshCount(); n != 1 {
		t.Errorf("%d refreshes, want 1", n)
	}
	if n := f.writes.puts.Load() - puts; n != 1 {
		t.Errorf("%d write-backs, want 1", n)
	}
	if n := f.server.refusedCount(); n != 0 {
		t.Errorf("the server refused %d refresh tokens", n)
	}
}

// TestOAuthRefusedTokenIsRefreshedOnce: the secret holds an access token
// that is not expired by the clock but that the server refuses (revoked,
// or issued by another grant). After the provider's 401 the worker
// invalidates it; the next resolve must not hand out the same token but
// refresh it: one token call, one write-back, and a token the server
// accepts. A second container whose own token was refused meanwhile uses
// the one just written back.
func TestOAuthRefusedTokenIsRefreshedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setupOAuth(t, newAuthServer(t, time.Hour))
	g, _ := f.storedGrant(t)
	g.AccessToken = NewSecret("not-a-token-the-server-issued")
	g.AccessTokenExpiresAt = time.Now().Add(time.Hour).Truncate(time.Second)
	if _, err := f.sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{
		SecretId: aws.String(f.arn), SecretString: aws.String(g.secretString())}); err != nil {
		t.Fatal(err)
	}
	a, b := f.container(t, nil, OAuthConfig{}), f.container(t, nil, OAuthConfig{})
	for _, r := range []*Resolver{a, b} {
		cred, err := r.ResolveConnection(ctx, f.conn)
		if err != nil || cred.Token.Reveal() != "not-a-token-the-server-issued" {
			t.Fatalf("first resolve = %v: want the stored token, fresh by the clock", err)
		}
	}
	for _, r := range []*Resolver{a, b} {
		r.Invalidate(f.conn.Reference) // the provider answered 401
		cred, err := r.ResolveConnection(ctx, f.conn)
		if err != nil || !f.server.active(cred.Token.Reveal()) {
			t.Fatalf("resolve after the 401: err = %v, or the server refuses the token", err)
		}
	}
	if n, w := f.server.refreshCount(), f.writes.puts.Load(); n != 1 || w != 1 {
		t.Errorf("%d token calls and %d write-backs, want 1 each", n, w)
	}
}

// TestOAuthWriteBackIsIdempotent: a write-back retried with the same
// ClientRequestToken (its answer was lost) creates no second version.
func TestOAuthWriteBackIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sm := newClient(motoURL)
	_, arn := testenv.CreateSecret(t, sm, testenv.SecretName(t, ""), `{"clientId":"c","clientSecret":"s","refreshToken":"r0"}`, "")
	o := &oauthRefresher{cfg: OAuthConfig{Secrets: sm}}
	g := OAuthGrant{ClientID: "c", ClientSecret: NewSecret("s"), RefreshToken: NewSecret("r1"), AccessToken: NewSecret("a1"),
		AccessTokenExpiresAt: time.Date(2026, 1, 1, 0, 30, 0, 0, time.UTC)}
	first, err := o.writeBack(ctx, arn, g)
	if err != nil {
		t.Fatal(err)
	}
	again, err := o.writeBack(ctx, arn, g)
	if err != nil || again != first {
		t.Errorf("retried write-back = %q, %v; want the same version %q", again, err, first)
	}
	out, err := sm.ListSecretVersionIds(ctx, &secretsmanager.ListSecretVersionIdsInput{SecretId: aws.String(arn)})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(out.Versions); n != 2 {
		t.Errorf("%d versions after one refresh written twice, want 2 (the original and the refresh)", n)
	}
}

// TestOAuthSecretWithoutRefreshConfigured: a resolver built without a
// database (a function that does not push) refuses an OAuth2 secret rather
// than hand out a token it cannot refresh.
func TestOAuthSecretWithoutRefreshConfigured(t *testing.T) {
	t.Parallel()
	b := setup(t, ResolverConfig{})
	org := "6d1c3a9e-0000-4000-8000-000000000001"
	name, _ := b.createSecret(t, "", `{"clientId":"c","clientSecret":"s","refreshToken":"r"}`, org)
	_, err := b.resolver.ResolveConnection(context.Background(), Connection{ID: org, OrganizationID: org, Provider: "xero", Reference: name})
	if !errors.Is(err, ErrRejected) {
		t.Errorf("err = %v, want ErrRejected", err)
	}
}

// TestOAuthConnectionsSharingASecretTakeTurns: two connections (two
// locations, say) name the same secret, so they share its refresh token.
// Containers refreshing them at once must still make one token call.
func TestOAuthConnectionsSharingASecretTakeTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setupOAuth(t, newAuthServer(t, time.Hour))
	g, _ := f.storedGrant(t)
	g.AccessTokenExpiresAt = time.Now().Add(-time.Minute).Truncate(time.Second)
	if _, err := f.sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{
		SecretId: aws.String(f.arn), SecretString: aws.String(g.secretString())}); err != nil {
		t.Fatal(err)
	}
	other := f.conn
	other.ID = f.db.Connection(t, testenv.ConnectionOpts{OrganizationID: f.conn.OrganizationID, Provider: "xero",
		CredentialReference: f.conn.Reference, Config: f.conn.Config})
	var wg sync.WaitGroup
	for i := range 4 {
		r := f.container(t, nil, OAuthConfig{})
		conn := []Connection{f.conn, other}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			cred, err := r.ResolveConnection(ctx, conn)
			if err != nil || !f.server.active(cred.Token.Reveal()) {
				t.Errorf("connection %s: err = %v, or the server refuses the token", conn.ID, err)
			}
		}()
	}
	wg.Wait()
	if n, refused := f.server.refreshCount(), f.server.refusedCount(); n != 1 || refused != 0 {
		t.Errorf("%d token calls, %d refused; want 1 and 0", n, refused)
	}
}

// TestNeedsReauthorizationAfterACallRefusesTheGrant: a provider refusing a
// connection's grant in a call (a 403 after a fresh token, reported by the
// push worker) records the connection as needing reauthorization, as a
// refused refresh does: one open conflict however often it is reported, no
// token call while it lasts, and a new secret version resumes it. A
// credential that is not an OAuth2 grant records nothing.
func TestNeedsReauthorizationAfterACallRefusesTheGrant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setupOAuth(t, newAuthServer(t, time.Hour))
	r := f.container(t, nil, OAuthConfig{Lease: time.Second, Wait: 3 * time.Second})
	for range 2 {
		recorded, err := r.NeedsReauthorization(ctx, f.conn, "xero answered 403: AuthorizationUnsuccessful")
		if err != nil || !recorded {
			t.Fatalf("NeedsReauthorization = %v, %v; want recorded", recorded, err)
		}
	}
	if n := f.db.Count(t, `select count(*) from external_integration_conflicts where integration_connection_id = $1
		and conflict_type = 'connection_unauthorized' and status = 'open'`, f.conn.ID); n != 1 {
		t.Errorf("%d open connection_unauthorized conflicts, want 1", n)
	}
	// The stored access token is refused: no container refreshes it while
	// the connection needs reauthorization (the claim holds its rows).
	g, _ := f.storedGrant(t)
	g.AccessTokenExpiresAt = time.Now().Add(-time.Minute)
	if _, err := f.sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{
		SecretId: aws.String(f.arn), SecretString: aws.String(g.secretString())}); err != nil {
		t.Fatal(err)
	}
	if n, err := r.CheckReauthorized(ctx); err != nil || n != 1 {
		t.Fatalf("a new secret version resumes it: CheckReauthorized = %d, %v; want 1", n, err)
	}
	if recorded, err := r.NeedsReauthorization(ctx, f.conn, "xero answered 403 again"); err != nil || !recorded {
		t.Fatalf("NeedsReauthorization = %v, %v; want recorded", recorded, err)
	}
	r.Invalidate(f.conn.Reference)
	if _, err := r.ResolveConnection(ctx, f.conn); !errors.Is(err, ErrReauthorizationNeeded) {
		t.Errorf("resolving a stale token after the refusal: %v, want ErrReauthorizationNeeded", err)
	}
	if n := f.server.refreshCount(); n != 0 {
		t.Errorf("%d token calls while the connection needs reauthorization, want 0", n)
	}
	tok := f.server.connect(t)
	if _, err := f.sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{
		SecretId: aws.String(f.arn), SecretString: aws.String(oauthSecret(f.server, tok))}); err != nil {
		t.Fatal(err)
	}
	if n, err := r.CheckReauthorized(ctx); err != nil || n != 1 {
		t.Fatalf("CheckReauthorized after reconnecting = %d, %v; want 1", n, err)
	}

	// A static token has nothing to reconnect.
	name, _ := testenv.CreateSecret(t, f.sm, testenv.SecretName(t, ""), `{"token":"static"}`, f.conn.OrganizationID)
	static := f.conn
	static.Reference = name
	if recorded, err := r.NeedsReauthorization(ctx, static, "403"); err != nil || recorded {
		t.Errorf("NeedsReauthorization of a static token = %v, %v; want nothing recorded", recorded, err)
	}
}

// TestAShortTokenWrittenWithoutItsIssueTimeIsNotRefreshedAtOnce: a secret
// the host wrote itself, without accessTokenIssuedAt, holding a token that
// lives 20 s from the write: the secret version's creation stands in for
// its issue, so its margin is 2 s and it is used, not refreshed on every
// resolve as a fixed 2-minute margin would.
func TestAShortTokenWrittenWithoutItsIssueTimeIsNotRefreshedAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setupOAuth(t, newAuthServer(t, time.Hour))
	g, _ := f.storedGrant(t)
	g.AccessTokenIssuedAt = time.Time{}
	g.AccessTokenExpiresAt = time.Now().Add(20 * time.Second).Truncate(time.Second)
	if _, err := f.sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{
		SecretId: aws.String(f.arn), SecretString: aws.String(g.secretString())}); err != nil {
		t.Fatal(err)
	}
	r := f.container(t, nil, OAuthConfig{})
	for range 5 {
		cred, err := r.ResolveConnection(ctx, f.conn)
		if err != nil || cred.Token.Reveal() != g.AccessToken.Reveal() {
			t.Fatalf("resolve = %v: want the stored token, 20 s from its expiry", err)
		}
	}
	if n := f.server.refreshCount(); n != 0 {
		t.Errorf("%d token calls for a token 20 s from its expiry, want none (its margin is a tenth of its life)", n)
	}
}
