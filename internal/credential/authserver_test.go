package credential

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ory/fosite"
	"github.com/ory/fosite/compose"
	"github.com/ory/fosite/storage"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/oauth2"
)

// authServer is a real OAuth2 authorization server in process: Ory fosite
// with its memory store, the authorization code and refresh token grants,
// and fosite's refresh token rotation, which it always applies: a refresh
// spends the refresh token and the access tokens of the grant, and
// presenting a spent refresh token again revokes the whole grant
// (handler/oauth2/flow_refresh.go, handleRefreshTokenReuse). fosite has no
// grace period for a spent refresh token.
type authServer struct {
	provider fosite.OAuth2Provider
	srv      *httptest.Server

	clientID, clientSecret string
	redirectURL            string

	// refreshes counts refresh_token grant requests; refused those
	// answered invalid_grant.
	refreshes, refused atomic.Int64
}

// newAuthServer starts a fosite server whose access tokens live
// accessLifespan.
func newAuthServer(t *testing.T, accessLifespan time.Duration) *authServer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &fosite.Config{
		AccessTokenLifespan:   accessLifespan,
		RefreshTokenLifespan:  time.Hour,
		AuthorizeCodeLifespan: time.Minute,
		GlobalSecret:          []byte(rand.Text() + rand.Text())[:32],
		HashCost:              bcrypt.MinCost,
	}
	store := storage.NewMemoryStore()
	a := &authServer{clientID: "outbox-app", clientSecret: rand.Text(), redirectURL: "http://localhost/callback"}
	hash, err := bcrypt.GenerateFromPassword([]byte(a.clientSecret), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	store.Clients[a.clientID] = &fosite.DefaultClient{
		ID: a.clientID, Secret: hash, RedirectURIs: []string{a.redirectURL},
		ResponseTypes: []string{"code"}, GrantTypes: []string{"authorization_code", "refresh_token"},
		Scopes: []string{"offline_access", "accounting"},
	}
	a.provider = compose.ComposeAllEnabled(cfg, store, key)

	mux := http.NewServeMux()
	mux.HandleFunc("/auth", a.authorizeEndpoint)
	mux.HandleFunc("/token", a.tokenEndpoint)
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

func (a *authServer) TokenURL() string                       { return a.srv.URL + "/token" }
func (a *authServer) clientCredentials() (id, secret string) { return a.clientID, a.clientSecret }
func (a *authServer) refreshCount() int64                    { return a.refreshes.Load() }
func (a *authServer) refusedCount() int64                    { return a.refused.Load() }

// authorizeEndpoint grants every requested scope to a fixed resource owner:
// the consent the host's back office collects.
func (a *authServer) authorizeEndpoint(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ar, err := a.provider.NewAuthorizeRequest(ctx, r)
	if err != nil {
		a.provider.WriteAuthorizeError(ctx, w, ar, err)
		return
	}
	for _, s := range ar.GetRequestedScopes() {
		ar.GrantScope(s)
	}
	resp, err := a.provider.NewAuthorizeResponse(ctx, ar, &fosite.DefaultSession{Subject: "owner"})
	if err != nil {
		a.provider.WriteAuthorizeError(ctx, w, ar, err)
		return
	}
	a.provider.WriteAuthorizeResponse(ctx, w, ar, resp)
}

func (a *authServer) tokenEndpoint(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	refresh := r.PostFormValue("grant_type") == "refresh_token"
	if refresh {
		a.refreshes.Add(1)
	}
	ar, err := a.provider.NewAccessRequest(ctx, r, &fosite.DefaultSession{})
	if err == nil {
		var resp fosite.AccessResponder
		if resp, err = a.provider.NewAccessResponse(ctx, ar); err == nil {
			a.provider.WriteAccessResponse(ctx, w, ar, resp)
			return
		}
	}
	if refresh && fosite.ErrorToRFC6749Error(err).ErrorField == "invalid_grant" {
		a.refused.Add(1)
	}
	a.provider.WriteAccessError(ctx, w, ar, err)
}

// connect runs the authorization code flow as the back office does after
// the consent screen and returns the tokens it got.
func (a *authServer) connect(t *testing.T) *oauth2.Token {
	t.Helper()
	cfg := a.oauth2Config()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(cfg.AuthCodeURL(rand.Text()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || loc.Query().Get("code") == "" {
		t.Fatalf("authorize answered %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	tok, err := cfg.Exchange(context.Background(), loc.Query().Get("code"))
	if err != nil {
		t.Fatal(err)
	}
	if tok.RefreshToken == "" {
		t.Fatal("the code exchange gave no refresh token")
	}
	return tok
}

func (a *authServer) oauth2Config() oauth2.Config {
	return oauth2.Config{ClientID: a.clientID, ClientSecret: a.clientSecret, RedirectURL: a.redirectURL,
		Scopes:   []string{"offline_access", "accounting"},
		Endpoint: oauth2.Endpoint{AuthURL: a.srv.URL + "/auth", TokenURL: a.TokenURL(), AuthStyle: oauth2.AuthStyleInHeader}}
}

// active reports whether the server still accepts accessToken: the check
// a protected resource makes.
func (a *authServer) active(accessToken string) bool {
	_, _, err := a.provider.IntrospectToken(context.Background(), accessToken, fosite.AccessToken, &fosite.DefaultSession{})
	return err == nil
}

// refreshable reports whether the server still honours refreshToken (it
// spends it: call it once at the end of a test).
func (a *authServer) refreshable(refreshToken string) bool {
	cfg := a.oauth2Config()
	_, err := cfg.TokenSource(context.Background(), &oauth2.Token{RefreshToken: refreshToken}).Token()
	return err == nil
}
