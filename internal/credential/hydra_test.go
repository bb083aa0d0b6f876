package credential

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
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
	hydra         *testenv.Hydra
	public, admin string
	proxy         *httptest.Server
	client        *http.Client

	clientID, clientSecret, redirectURL string

	refreshes, refused atomic.Int64
}

// startHydra runs Hydra (testenv.StartHydra) on a fresh database of the
// test cluster with the given refresh token grace period (0: none), behind
// a counting proxy of its token endpoint.
func startHydra(t *testing.T, grace time.Duration) *hydraServer {
	t.Helper()
	hy := testenv.StartHydra(t, servers.Postgres(t), grace, []string{"http://127.0.0.1/callback"},
		[]string{"offline_access", "accounting"})
	h := &hydraServer{hydra: hy, public: hy.Public, admin: hy.Admin, client: &http.Client{Timeout: 10 * time.Second},
		redirectURL: "http://127.0.0.1/callback", clientID: hy.ClientID, clientSecret: hy.ClientSecret}
	t.Cleanup(h.client.CloseIdleConnections)
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

func (h *hydraServer) oauth2Config(tokenURL string) oauth2.Config {
	return oauth2.Config{ClientID: h.clientID, ClientSecret: h.clientSecret, RedirectURL: h.redirectURL,
		Scopes:   []string{"offline_access", "accounting"},
		Endpoint: oauth2.Endpoint{AuthURL: h.public + "/oauth2/auth", TokenURL: tokenURL, AuthStyle: oauth2.AuthStyleInHeader}}
}

// connect runs the authorization code flow, accepting the login and the
// consent through the admin API as a login and consent app would.
func (h *hydraServer) connect(t *testing.T) *oauth2.Token {
	t.Helper()
	cfg := h.oauth2Config(h.public + "/oauth2/token")
	callback := h.hydra.Consent(t, cfg.AuthCodeURL(rand.Text()))
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

func (h *hydraServer) active(accessToken string) bool { return h.hydra.Active(accessToken) }

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
