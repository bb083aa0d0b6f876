package credential

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"integration-outbox/internal/testenv"
)

// hydraServer is Ory Hydra, a real OAuth2 server, run as a process on the
// test cluster: unlike fosite it can keep a spent refresh token usable for a
// grace period after its rotation (oauth2.grant.refresh_token.rotation_grace_period,
// at most 5 minutes), as Xero does for about 30 minutes; outside the grace
// period a spent refresh token revokes the grant. The resolvers reach its
// token endpoint through a proxy that only counts the requests.
type hydraServer struct {
	public, admin string
	proxy         *httptest.Server
	client        *http.Client

	clientID, clientSecret, redirectURL string

	refreshes, refused atomic.Int64
}

// hydraBinary is the hydra executable (make bin/hydra builds it): HYDRA_BIN,
// else bin/hydra under the repository, else hydra on PATH. The test is
// skipped without one.
func hydraBinary(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("HYDRA_BIN"), filepath.Join("..", "..", "bin", "hydra")} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			abs, _ := filepath.Abs(p)
			return abs
		}
	}
	if p, err := exec.LookPath("hydra"); err == nil {
		return p
	}
	t.Skip("no hydra binary (make bin/hydra, or HYDRA_BIN): the Hydra scenarios need it")
	return ""
}

// startHydra runs Hydra on a fresh database of the test cluster with the
// given refresh token grace period (0: none).
func startHydra(t *testing.T, grace time.Duration) *hydraServer {
	t.Helper()
	bin := hydraBinary(t)
	ctx := context.Background()
	dsn, err := servers.Postgres(t).CreateDatabase(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dsn, "sslmode=") {
		dsn += map[bool]string{true: "&", false: "?"}[strings.Contains(dsn, "?")] + "sslmode=disable"
	}
	publicPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	adminPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	h := &hydraServer{
		public: fmt.Sprintf("http://127.0.0.1:%d", publicPort), admin: fmt.Sprintf("http://127.0.0.1:%d", adminPort),
		client: &http.Client{Timeout: 10 * time.Second}, redirectURL: "http://127.0.0.1/callback",
	}
	env := append(os.Environ(), "DSN="+dsn, "LOG_LEVEL=error", "LOG_LEAK_SENSITIVE_VALUES=false",
		"SECRETS_SYSTEM="+rand.Text()+rand.Text(),
		"SERVE_PUBLIC_HOST=127.0.0.1", "SERVE_PUBLIC_PORT="+strconv.Itoa(publicPort),
		"SERVE_ADMIN_HOST=127.0.0.1", "SERVE_ADMIN_PORT="+strconv.Itoa(adminPort),
		"URLS_SELF_ISSUER="+h.public, "URLS_LOGIN=http://127.0.0.1:9/login", "URLS_CONSENT=http://127.0.0.1:9/consent",
		"TTL_ACCESS_TOKEN=1h", "OAUTH2_GRANT_REFRESH_TOKEN_ROTATION_GRACE_PERIOD="+grace.String())

	migrate := exec.Command(bin, "migrate", "sql", "up", "-e", "--yes")
	migrate.Env = env
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("hydra migrate: %v\n%s", err, out)
	}
	serve := exec.Command(bin, "serve", "all", "--dev")
	serve.Env = env
	var logs bytes.Buffer
	serve.Stdout, serve.Stderr = &logs, &logs
	serve.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { serve.Wait(); close(exited) }()
	t.Cleanup(func() {
		serve.Process.Kill()
		<-exited
		h.client.CloseIdleConnections()
	})
	for deadline := time.Now().Add(60 * time.Second); ; {
		resp, err := h.client.Get(h.admin + "/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-exited:
			t.Fatalf("hydra exited during start-up:\n%s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("hydra not ready within 60s: %v\n%s", err, logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}

	var created struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
	}
	h.call(t, http.MethodPost, h.admin+"/admin/clients", map[string]any{
		"grant_types": []string{"authorization_code", "refresh_token"}, "response_types": []string{"code"},
		"scope": "offline_access accounting", "redirect_uris": []string{h.redirectURL},
		"token_endpoint_auth_method": "client_secret_basic",
	}, &created)
	h.clientID, h.clientSecret = created.ClientID, created.ClientSecret

	h.proxy = httptest.NewServer(http.HandlerFunc(h.countingProxy))
	t.Cleanup(h.proxy.Close)
	return h
}

// countingProxy forwards a token request to Hydra unchanged and counts the
// refresh_token grants and their invalid_grant answers.
func (h *hydraServer) countingProxy(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	form, _ := url.ParseQuery(string(body))
	refresh := form.Get("grant_type") == "refresh_token"
	if refresh {
		h.refreshes.Add(1)
	}
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, h.public+"/oauth2/token", bytes.NewReader(body))
	req.Header = r.Header.Clone()
	resp, err := h.client.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if refresh && bytes.Contains(answer, []byte(`"invalid_grant"`)) {
		h.refused.Add(1)
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(answer)
}

// call sends a JSON request to Hydra's admin API and decodes its answer.
func (h *hydraServer) call(t *testing.T, method, u string, in, out any) {
	t.Helper()
	b, _ := json.Marshal(in)
	req, _ := http.NewRequest(method, u, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %s", method, u, resp.StatusCode, answer)
	}
	if err := json.Unmarshal(answer, out); err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
}

func (h *hydraServer) oauth2Config(tokenURL string) oauth2.Config {
	return oauth2.Config{ClientID: h.clientID, ClientSecret: h.clientSecret, RedirectURL: h.redirectURL,
		Scopes:   []string{"offline_access", "accounting"},
		Endpoint: oauth2.Endpoint{AuthURL: h.public + "/oauth2/auth", TokenURL: tokenURL, AuthStyle: oauth2.AuthStyleInHeader}}
}

// connect runs the authorization code flow, accepting the login and the
// consent through the admin API as a login and consent app would.
func (h *hydraServer) connect(t *testing.T) *oauth2.Token {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer browser.CloseIdleConnections()
	follow := func(u string) *url.URL {
		resp, err := browser.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
		if err != nil || resp.Header.Get("Location") == "" {
			t.Fatalf("GET %s answered %d without a redirect", u, resp.StatusCode)
		}
		return loc
	}
	cfg := h.oauth2Config(h.public + "/oauth2/token")
	login := follow(cfg.AuthCodeURL(rand.Text()))
	var accepted struct {
		RedirectTo string `json:"redirect_to"`
	}
	h.call(t, http.MethodPut, h.admin+"/admin/oauth2/auth/requests/login/accept?login_challenge="+
		url.QueryEscape(login.Query().Get("login_challenge")), map[string]any{"subject": "owner"}, &accepted)
	consent := follow(accepted.RedirectTo)
	h.call(t, http.MethodPut, h.admin+"/admin/oauth2/auth/requests/consent/accept?consent_challenge="+
		url.QueryEscape(consent.Query().Get("consent_challenge")),
		map[string]any{"grant_scope": []string{"offline_access", "accounting"}}, &accepted)
	callback := follow(accepted.RedirectTo)
	tok, err := cfg.Exchange(context.Background(), callback.Query().Get("code"))
	if err != nil {
		t.Fatal(err)
	}
	if tok.RefreshToken == "" {
		t.Fatal("the code exchange gave no refresh token")
	}
	return tok
}

func (h *hydraServer) TokenURL() string                       { return h.proxy.URL + "/oauth2/token" }
func (h *hydraServer) clientCredentials() (id, secret string) { return h.clientID, h.clientSecret }
func (h *hydraServer) refreshCount() int64                    { return h.refreshes.Load() }
func (h *hydraServer) refusedCount() int64                    { return h.refused.Load() }

func (h *hydraServer) active(accessToken string) bool {
	resp, err := h.client.PostForm(h.admin+"/admin/oauth2/introspect", url.Values{"token": {accessToken}})
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var out struct {
		Active bool `json:"active"`
	}
	return json.NewDecoder(resp.Body).Decode(&out) == nil && out.Active
}

func (h *hydraServer) refreshable(refreshToken string) bool {
	cfg := h.oauth2Config(h.public + "/oauth2/token")
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, h.client)
	_, err := cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: refreshToken}).Token()
	return err == nil
}

// TestOAuthContainerDiesBeforeWriteBackOnHydra: a container gets new tokens
// from Hydra and dies before writing them back; the next container, once
// the lease expired, presents the refresh token still stored, which Hydra
// has already rotated. With a grace period (Xero keeps a rotated refresh
// token usable for about 30 minutes) the refresh succeeds and the
// connection goes on with nobody involved; without one Hydra revokes the
// grant and the connection needs reauthorization, with its conflict.
func TestOAuthContainerDiesBeforeWriteBackOnHydra(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		grace    time.Duration
		recovers bool
	}{
		{"with a grace period", 2 * time.Minute, true},
		{"without a grace period", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := setupOAuth(t, startHydra(t, tc.grace))
			b := f.crashAfterTokenCall(t)

			cred, err := b.ResolveConnection(ctx, f.conn)
			state := f.db.Count(t, `select count(*) from integration_outbox_connection_authorization
				where connection_id = $1 and needs_reauthorization_since is not null`, f.conn.ID)
			conflicts := f.db.Count(t, `select count(*) from external_integration_conflicts
				where integration_connection_id = $1 and conflict_type = 'connection_unauthorized' and status = 'open'`, f.conn.ID)
			if !tc.recovers {
				if !errors.Is(err, ErrReauthorizationNeeded) || state != 1 || conflicts != 1 {
					t.Fatalf("err = %v, %d state rows, %d open conflicts; want ErrReauthorizationNeeded, 1, 1", err, state, conflicts)
				}
				return
			}
			if err != nil || !f.server.active(cred.Token.Reveal()) {
				t.Fatalf("after the crash: err = %v, or Hydra refuses the token", err)
			}
			if state != 0 || conflicts != 0 || f.server.refusedCount() != 0 {
				t.Errorf("%d state rows, %d open conflicts, %d refusals; want none", state, conflicts, f.server.refusedCount())
			}
			if n := f.server.refreshCount(); n != 2 {
				t.Errorf("%d refreshes, want 2 (the lost one and the retry)", n)
			}
			stored, _ := f.storedGrant(t)
			if !f.server.refreshable(stored.RefreshToken.Reveal()) {
				t.Error("Hydra refuses the stored refresh token: the grant was revoked")
			}
		})
	}
}
