package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Hydra is Ory Hydra, a real OAuth2 server, run as a process on a fresh
// database of the test cluster, with one confidential client
// (client_secret_basic; authorization_code and refresh_token grants).
// There is no login or consent app: a test plays the user's browser and
// accepts the login and the consent through the admin API (Consent).
type Hydra struct {
	// Public is the public endpoint (authorization, token), Admin the
	// admin API.
	Public, Admin string
	// ClientID and ClientSecret are the client's credentials.
	ClientID, ClientSecret string
	// Scopes are the scopes the client may ask for.
	Scopes []string

	client *http.Client
}

// HydraBinary is the hydra executable (make bin/hydra builds it):
// HYDRA_BIN, else bin/hydra at the repository's root, else hydra on PATH;
// "" without one.
func HydraBinary() string {
	if p := os.Getenv("HYDRA_BIN"); p != "" {
		return p
	}
	if dir, err := os.Getwd(); err == nil {
		for ; ; dir = filepath.Dir(dir) {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				if p := filepath.Join(dir, "bin", "hydra"); fileExists(p) {
					return p
				}
				break
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	if p, err := exec.LookPath("hydra"); err == nil {
		return p
	}
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// StartHydra runs Hydra on a fresh database of pg whose client may redirect
// to redirectURIs (a loopback one matches any port) and ask for scopes;
// grace is the refresh token rotation grace period (0: none). The test is
// skipped without a hydra binary.
func StartHydra(t testing.TB, pg *Postgres, grace time.Duration, redirectURIs, scopes []string) *Hydra {
	t.Helper()
	bin := HydraBinary()
	if bin == "" {
		t.Skip("no hydra binary (make bin/hydra, or HYDRA_BIN): the Hydra scenarios need it")
	}
	ctx := context.Background()
	dsn, err := pg.CreateDatabase(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dsn, "sslmode=") {
		dsn += map[bool]string{true: "&", false: "?"}[strings.Contains(dsn, "?")] + "sslmode=disable"
	}
	publicPort, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	adminPort, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	h := &Hydra{Public: fmt.Sprintf("http://127.0.0.1:%d", publicPort), Admin: fmt.Sprintf("http://127.0.0.1:%d", adminPort),
		Scopes: scopes, client: &http.Client{Timeout: 10 * time.Second}}
	env := append(os.Environ(), "DSN="+dsn, "LOG_LEVEL=error", "LOG_LEAK_SENSITIVE_VALUES=false",
		"SECRETS_SYSTEM="+rand.Text()+rand.Text(),
		"SERVE_PUBLIC_HOST=127.0.0.1", "SERVE_PUBLIC_PORT="+strconv.Itoa(publicPort),
		"SERVE_ADMIN_HOST=127.0.0.1", "SERVE_ADMIN_PORT="+strconv.Itoa(adminPort),
		"URLS_SELF_ISSUER="+h.Public, "URLS_LOGIN=http://127.0.0.1:9/login", "URLS_CONSENT=http://127.0.0.1:9/consent",
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
		resp, err := h.client.Get(h.Admin + "/health/ready")
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
	h.Call(t, http.MethodPost, h.Admin+"/admin/clients", map[string]any{
		"grant_types": []string{"authorization_code", "refresh_token"}, "response_types": []string{"code"},
		"scope": strings.Join(scopes, " "), "redirect_uris": redirectURIs,
		"token_endpoint_auth_method": "client_secret_basic",
	}, &created)
	h.ClientID, h.ClientSecret = created.ClientID, created.ClientSecret
	return h
}

// AuthURL and TokenURL are the client's endpoints.
func (h *Hydra) AuthURL() string  { return h.Public + "/oauth2/auth" }
func (h *Hydra) TokenURL() string { return h.Public + "/oauth2/token" }

// Call sends a JSON request to Hydra's admin API and decodes its answer.
func (h *Hydra) Call(t testing.TB, method, u string, in, out any) {
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

// Consent plays the user's browser from authURL (an authorization request
// of the client): it accepts the login (subject "owner") and the consent to
// every scope through the admin API, as a login and consent app would, and
// returns the client's redirect (code and state), not followed.
func (h *Hydra) Consent(t testing.TB, authURL string) *url.URL {
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
	login := follow(authURL)
	var accepted struct {
		RedirectTo string `json:"redirect_to"`
	}
	h.Call(t, http.MethodPut, h.Admin+"/admin/oauth2/auth/requests/login/accept?login_challenge="+
		url.QueryEscape(login.Query().Get("login_challenge")), map[string]any{"subject": "owner"}, &accepted)
	consent := follow(accepted.RedirectTo)
	h.Call(t, http.MethodPut, h.Admin+"/admin/oauth2/auth/requests/consent/accept?consent_challenge="+
		url.QueryEscape(consent.Query().Get("consent_challenge")),
		map[string]any{"grant_scope": h.Scopes}, &accepted)
	return follow(accepted.RedirectTo)
}

// Active reports whether Hydra accepts accessToken (introspection).
func (h *Hydra) Active(accessToken string) bool {
	resp, err := h.client.PostForm(h.Admin+"/admin/oauth2/introspect", url.Values{"token": {accessToken}})
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var out struct {
		Active bool `json:"active"`
	}
	return json.NewDecoder(resp.Body).Decode(&out) == nil && out.Active
}
