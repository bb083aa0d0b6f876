package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/testenv"
)

// connectRun is one outboxctl connect running in the background, its
// output read line by line.
type connectRun struct {
	authURL chan string
	done    chan int
	mu      sync.Mutex
	out     strings.Builder
	stderr  strings.Builder
}

func startConnect(t *testing.T, env map[string]string, stdin string, args ...string) *connectRun {
	t.Helper()
	r := &connectRun{authURL: make(chan string, 1), done: make(chan int, 1)}
	pr, pw := io.Pipe()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			r.mu.Lock()
			r.out.WriteString(line + "\n")
			r.mu.Unlock()
			if strings.HasPrefix(line, "http") {
				r.authURL <- line
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	go func() {
		code := run(ctx, append([]string{"connect"}, args...), func(k string) string { return env[k] },
			strings.NewReader(stdin), pw, &syncWriter{mu: &r.mu, b: &r.stderr})
		pw.Close()
		r.done <- code
	}()
	return r
}

type syncWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (r *connectRun) output() (string, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String(), r.stderr.String()
}

// grantAtOnce is the browser on fosite, which grants the consent at once:
// it opens the authorization URL and returns the redirect to the client.
func grantAtOnce(t *testing.T, raw string) *url.URL {
	t.Helper()
	browser := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := browser.Get(raw)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// consent plays the user's browser: it opens the authorization URL the
// command printed, where browse has the authorization server grant the
// consent, and follows its redirect to the command's loopback listener,
// adding extra to it (what QuickBooks adds: realmId).
func (r *connectRun) consent(t *testing.T, browse func(*testing.T, string) *url.URL, extra url.Values) *url.URL {
	t.Helper()
	var raw string
	select {
	case raw = <-r.authURL:
	case code := <-r.done:
		out, errs := r.output()
		t.Fatalf("connect ended (%d) before printing the authorization URL:\n%s\n%s", code, out, errs)
	}
	auth, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := auth.Query()
	if q.Get("state") == "" || q.Get("code_challenge") == "" || q.Get("code_challenge_method") != "S256" {
		t.Fatalf("the authorization URL %s lacks state or an S256 PKCE challenge", raw)
	}
	loc := browse(t, raw)
	if loc.Query().Get("code") == "" {
		t.Fatalf("the authorization redirected to %s, without a code", loc)
	}
	lq := loc.Query()
	for k, v := range extra {
		lq[k] = v
	}
	loc.RawQuery = lq.Encode()
	back, err := http.Get(loc.String())
	if err != nil {
		t.Fatal(err)
	}
	back.Body.Close()
	if back.StatusCode != http.StatusOK {
		t.Fatalf("the loopback redirect answered %d", back.StatusCode)
	}
	return auth
}

func (r *connectRun) wait(t *testing.T) (string, string) {
	t.Helper()
	code := <-r.done
	out, errs := r.output()
	if code != exitOK {
		t.Fatalf("connect exited %d:\n%s\n%s", code, out, errs)
	}
	return out, errs
}

// connectEnv is the environment of a connect against the test's servers.
func connectEnv(t *testing.T, srv *testenv.OAuthServer) map[string]string {
	m := servers.Moto(t)
	_, secret := srv.ClientCredentials()
	return map[string]string{"AWS_ENDPOINT_URL": m.URL, "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "test",
		"AWS_SECRET_ACCESS_KEY": "test", "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true", "OAUTH_CLIENT_SECRET": secret,
		"CREDENTIAL_REFERENCE_PREFIX": "integrations/"}
}

// storedGrant reads the secret connect wrote, as the push function does.
func storedGrant(t *testing.T, env map[string]string, org, name string) credential.OAuthGrant {
	t.Helper()
	sm := secretsmanager.NewFromConfig(servers.Moto(t).AWSConfig())
	r, err := credential.NewResolver(sm, credential.ResolverConfig{Prefix: env["CREDENTIAL_REFERENCE_PREFIX"], Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.Resolve(context.Background(), org, name)
	if err != nil || c.OAuth == nil {
		t.Fatalf("the written secret does not resolve as this organization's OAuth2 grant: %v", err)
	}
	desc, err := sm.DescribeSecret(context.Background(), &secretsmanager.DescribeSecretInput{SecretId: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	if len(desc.Tags) != 1 || aws.ToString(desc.Tags[0].Key) != "organization_id" || aws.ToString(desc.Tags[0].Value) != org {
		t.Errorf("tags %v, want organization_id=%s", desc.Tags, org)
	}
	return *c.OAuth
}

// TestConnectXeroEndToEnd: outboxctl connect xero runs the authorization
// code flow with state and PKCE against a real authorization server (Ory
// fosite, which checks the PKCE verifier), the test granting the consent as
// the user's browser would; it lists the tenants the grant reaches (a Xero
// /connections stand-in that accepts only the server's live access
// tokens), takes the one picked on stdin, writes the secret in the push
// function's shape, tagged with the organization, and inserts the
// connection's row. The tokens it stored are the server's.
func TestConnectXeroEndToEnd(t *testing.T) {
	t.Parallel()
	srv, err := testenv.NewOAuthServer(30 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	tenants := xeroTenants(t, srv)
	f := servers.Postgres(t).NewDB(t)
	org := f.NewID(t)
	env := connectEnv(t, srv)
	env["DATABASE_URL"] = f.URL
	id, _ := srv.ClientCredentials()

	r := startConnect(t, env, "2\n", "xero", "-org", org, "-client-id", id, "-redirect-uri", "http://127.0.0.1:0/callback",
		"-scope", "offline_access accounting", "-auth-url", srv.AuthURL(), "-token-url", srv.TokenURL(), "-connections-url", tenants.URL+"/connections", "-insert")
	r.consent(t, grantAtOnce, nil)
	out, _ := r.wait(t)
	if !strings.Contains(out, "Acme Trading") || !strings.Contains(out, "inserted") {
		t.Errorf("output:\n%s", out)
	}

	var conn, ref, provider string
	var cfg map[string]string
	if err := f.Pool.QueryRow(context.Background(), `select id::text, credential_reference, provider, config_json
		from integration_connections where organization_id = $1`, org).Scan(&conn, &ref, &provider, &cfg); err != nil {
		t.Fatal(err)
	}
	if provider != "xero" || ref != "integrations/"+org+"/"+conn || cfg["tenantId"] != "22222222-2222-4222-8222-222222222222" ||
		cfg["tokenUrl"] != srv.TokenURL() {
		t.Errorf("row: provider %s, reference %s, config %v", provider, ref, cfg)
	}
	g := storedGrant(t, env, org, ref)
	if g.ClientID != id || !srv.Active(g.AccessToken.Reveal()) || g.AccessTokenIssuedAt.IsZero() ||
		g.AccessTokenExpiresAt.Sub(g.AccessTokenIssuedAt) < 29*time.Minute {
		t.Errorf("stored grant: client %s, access token active %v, issued %v, expires %v", g.ClientID,
			srv.Active(g.AccessToken.Reveal()), g.AccessTokenIssuedAt, g.AccessTokenExpiresAt)
	}
	if !srv.Refreshable(g.RefreshToken.Reveal()) {
		t.Error("the server does not honour the stored refresh token")
	}
}

// xeroTenants serves Xero's GET /connections with two tenants to the
// server's live access tokens.
func xeroTenants(t *testing.T, srv *testenv.OAuthServer) *httptest.Server {
	t.Helper()
	tenants := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if r.URL.Path != "/connections" || !ok || !srv.Active(tok) {
			http.Error(w, `{"Title":"Unauthorized"}`, http.StatusUnauthorized)
			return
		}
		json.NewEncoder(w).Encode([]map[string]string{
			{"id": "c1", "tenantId": "11111111-1111-4111-8111-111111111111", "tenantType": "ORGANISATION", "tenantName": "Demo Company (UK)"},
			{"id": "c2", "tenantId": "22222222-2222-4222-8222-222222222222", "tenantType": "ORGANISATION", "tenantName": "Acme Trading"},
		})
	}))
	t.Cleanup(tenants.Close)
	return tenants
}

// TestReconnectEndsTheHoldAtOnce: `outboxctl connect -connection <id>` of
// a connection held for reauthorization, with DATABASE_URL set, writes the
// secret's new version and ends the hold there and then: the connection's
// state is cleared, its connection_unauthorized conflict resolved and its
// held command due now, not at its recheck a minute later.
func TestReconnectEndsTheHoldAtOnce(t *testing.T) {
	t.Parallel()
	srv, err := testenv.NewOAuthServer(30 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	tenants := xeroTenants(t, srv)
	f := servers.Postgres(t).NewDB(t)
	ctx := context.Background()
	org := f.NewID(t)
	env := connectEnv(t, srv)
	env["DATABASE_URL"] = f.URL
	id, _ := srv.ClientCredentials()
	args := []string{"-org", org, "-client-id", id, "-redirect-uri", "http://127.0.0.1:0/callback",
		"-scope", "offline_access accounting", "-auth-url", srv.AuthURL(), "-token-url", srv.TokenURL(),
		"-connections-url", tenants.URL + "/connections"}
	r := startConnect(t, env, "2\n", append([]string{"xero"}, append(args, "-insert")...)...)
	r.consent(t, grantAtOnce, nil)
	r.wait(t)
	var conn, ref string
	if err := f.Pool.QueryRow(ctx, `select id::text, credential_reference from integration_connections
		where organization_id = $1`, org).Scan(&conn, &ref); err != nil {
		t.Fatal(err)
	}
	// The grant refused, as a refresh would record it: the refused version
	// is the one the first connect wrote (any other than the next one).
	for _, stmt := range []string{
		`insert into integration_outbox_connection_authorization (connection_id, organization_id, credential_reference,
			needs_reauthorization_since, secret_version_id, last_error) values ($1, $2, $3, now(), 'refused-version', 'invalid_grant')`,
		`insert into integration_outbox_connection_state (connection_id, organization_id, provider, unauthorized_since, unauthorized_reason)
			values ($1, $2, 'xero', now(), 'invalid_grant')`,
		`insert into external_integration_conflicts (organization_id, integration_connection_id, conflict_type, severity, summary, status)
			values ($2, $1, 'connection_unauthorized', 'high', 'needs reauthorization', 'open')`,
	} {
		a := []any{conn, org}
		if strings.Contains(stmt, "credential_reference") {
			a = append(a, ref)
		}
		if _, err := f.Pool.Exec(ctx, stmt, a...); err != nil {
			t.Fatal(err)
		}
	}
	po := f.PurchaseOrder(t, org, "", 1)
	held := f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, Provider: "xero", EntityID: po})
	if _, err := f.Pool.Exec(ctx, `update external_integration_outbox set status = 'failed',
		next_attempt_at = now() + interval '1 minute' where id = $1`, held); err != nil {
		t.Fatal(err)
	}

	r = startConnect(t, env, "2\n", append([]string{"xero"}, append(args, "-connection", conn)...)...)
	r.consent(t, grantAtOnce, nil)
	out, _ := r.wait(t)
	if !strings.Contains(out, "reconnected: its held commands are due now") {
		t.Errorf("output:\n%s", out)
	}
	var unauthorized, due bool
	var open int
	if err := f.Pool.QueryRow(ctx, `select
		(select unauthorized_since is not null from integration_outbox_connection_state where connection_id = $1),
		(select next_attempt_at <= now() from external_integration_outbox where id = $2),
		(select count(*) from external_integration_conflicts where integration_connection_id = $1 and status = 'open')`,
		conn, held).Scan(&unauthorized, &due, &open); err != nil {
		t.Fatal(err)
	}
	if unauthorized || !due || open != 0 {
		t.Errorf("after the reconnect: unauthorized %v, held row due %v, %d open conflicts; want false, true, 0", unauthorized, due, open)
	}
}

// TestConnectQuickBooksPrintsTheRow: outboxctl connect quickbooks reads
// the company from the redirect's realmId and prints the row to insert.
func TestConnectQuickBooksPrintsTheRow(t *testing.T) {
	t.Parallel()
	srv, err := testenv.NewOAuthServer(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	env := connectEnv(t, srv)
	org := newUUID()
	id, _ := srv.ClientCredentials()
	r := startConnect(t, env, "", "quickbooks", "-org", org, "-client-id", id, "-redirect-uri", "http://127.0.0.1:0/callback",
		"-scope", "offline_access accounting", "-auth-url", srv.AuthURL(), "-token-url", srv.TokenURL())
	r.consent(t, grantAtOnce, url.Values{"realmId": {"9130354"}})
	out, _ := r.wait(t)
	if !strings.Contains(out, "insert into integration_connections") || !strings.Contains(out, `"realmId":"9130354"`) ||
		!strings.Contains(out, "'quickbooks'") {
		t.Fatalf("output:\n%s", out)
	}
	name := out[strings.Index(out, "secret ")+len("secret ") : strings.Index(out, " written")]
	if !strings.HasPrefix(name, "integrations/"+org+"/") {
		t.Fatalf("secret %q, want it under integrations/%s/", name, org)
	}
	if g := storedGrant(t, env, org, name); !srv.Active(g.AccessToken.Reveal()) {
		t.Error("the stored access token is not the server's")
	}
}

// TestConnectRefusesPlainHTTPTokenURL: a plain-http token URL is refused,
// as the push function refuses it, unless WEBHOOK_ALLOW_PRIVATE_NETWORKS is
// on; nothing is listened on or written.
func TestConnectRefusesPlainHTTPTokenURL(t *testing.T) {
	t.Parallel()
	var out, errs strings.Builder
	env := map[string]string{"OAUTH_CLIENT_SECRET": "s"}
	code := run(context.Background(), []string{"connect", "xero", "-org", newUUID(), "-client-id", "app",
		"-token-url", "http://identity.example/connect/token"}, func(k string) string { return env[k] },
		strings.NewReader(""), &out, &errs)
	if code != exitUsage || !strings.Contains(errs.String(), "-token-url must use https") {
		t.Fatalf("exit %d, stderr %q", code, errs.String())
	}
}

// TestConnectXeroOnHydra: the same flow against Ory Hydra, its login and
// consent accepted by the test through Hydra's admin API as a login and
// consent app would; Hydra checks the PKCE verifier too. One tenant: it is
// taken without asking. The row is printed.
func TestConnectXeroOnHydra(t *testing.T) {
	t.Parallel()
	h := testenv.StartHydra(t, servers.Postgres(t), 0, []string{"http://127.0.0.1/callback"}, []string{"offline_access", "accounting"})
	tenants := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || !h.Active(tok) {
			http.Error(w, `{"Title":"Unauthorized"}`, http.StatusUnauthorized)
			return
		}
		json.NewEncoder(w).Encode([]map[string]string{
			{"id": "c1", "tenantId": "33333333-3333-4333-8333-333333333333", "tenantType": "ORGANISATION", "tenantName": "Hydra Trading"}})
	}))
	t.Cleanup(tenants.Close)
	m := servers.Moto(t)
	env := map[string]string{"AWS_ENDPOINT_URL": m.URL, "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "test",
		"AWS_SECRET_ACCESS_KEY": "test", "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true", "OAUTH_CLIENT_SECRET": h.ClientSecret,
		"CREDENTIAL_REFERENCE_PREFIX": "integrations/"}
	org := newUUID()
	r := startConnect(t, env, "", "xero", "-org", org, "-client-id", h.ClientID, "-redirect-uri", "http://127.0.0.1:0/callback",
		"-scope", "offline_access accounting", "-auth-url", h.AuthURL(), "-token-url", h.TokenURL(),
		"-connections-url", tenants.URL+"/connections")
	r.consent(t, func(t *testing.T, raw string) *url.URL { return h.Consent(t, raw) }, nil)
	out, _ := r.wait(t)
	if !strings.Contains(out, `"tenantId":"33333333-3333-4333-8333-333333333333"`) || !strings.Contains(out, "insert into integration_connections") {
		t.Fatalf("output:\n%s", out)
	}
	name := out[strings.Index(out, "secret ")+len("secret ") : strings.Index(out, " written")]
	g := storedGrant(t, env, org, name)
	if !h.Active(g.AccessToken.Reveal()) || g.RefreshToken.IsZero() || g.ClientID != h.ClientID {
		t.Errorf("the stored grant is not Hydra's: client %s, access token active %v", g.ClientID, h.Active(g.AccessToken.Reveal()))
	}
}
