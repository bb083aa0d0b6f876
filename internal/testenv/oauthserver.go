package testenv

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/ory/fosite"
	"github.com/ory/fosite/compose"
	"github.com/ory/fosite/storage"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/oauth2"
)

// OAuthServer is a real OAuth2 authorization server in process, for the
// tests and the benchmarks: Ory fosite with its memory store, the
// authorization code and refresh token grants, and fosite's refresh token
// rotation, which it always applies: a refresh spends the refresh token and
// the access tokens of the grant, and presenting a spent refresh token again
// revokes the whole grant (handler/oauth2/flow_refresh.go,
// handleRefreshTokenReuse). fosite has no grace period for a spent refresh
// token.
type OAuthServer struct {
	provider fosite.OAuth2Provider
	srv      *httptest.Server

	clientID, clientSecret string
	redirectURL            string

	// refreshes counts refresh_token grant requests; refused those
	// answered invalid_grant.
	refreshes, refused atomic.Int64
}

// NewOAuthServer starts a fosite server on loopback whose access tokens
// live accessLifespan. Close stops it.
func NewOAuthServer(accessLifespan time.Duration) (*OAuthServer, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	cfg := &fosite.Config{
		AccessTokenLifespan:   accessLifespan,
		RefreshTokenLifespan:  24 * time.Hour,
		AuthorizeCodeLifespan: time.Minute,
		GlobalSecret:          []byte(rand.Text() + rand.Text())[:32],
		HashCost:              bcrypt.MinCost,
	}
	store := storage.NewMemoryStore()
	a := &OAuthServer{clientID: "outbox-app", clientSecret: rand.Text(), redirectURL: "http://localhost/callback"}
	hash, err := bcrypt.GenerateFromPassword([]byte(a.clientSecret), bcrypt.MinCost)
	if err != nil {
		return nil, err
	}
	store.Clients[a.clientID] = &fosite.DefaultClient{
		// 127.0.0.1/callback: a native app's loopback redirect, any port
		// (RFC 8252 7.3), as outboxctl connect uses it.
		ID: a.clientID, Secret: hash, RedirectURIs: []string{a.redirectURL, "http://127.0.0.1/callback"},
		ResponseTypes: []string{"code"}, GrantTypes: []string{"authorization_code", "refresh_token"},
		Scopes: []string{"offline_access", "accounting"},
	}
	a.provider = compose.ComposeAllEnabled(cfg, store, key)

	mux := http.NewServeMux()
	mux.HandleFunc("/auth", a.authorizeEndpoint)
	mux.HandleFunc("/token", a.tokenEndpoint)
	a.srv = httptest.NewServer(mux)
	return a, nil
}

// Close stops the server.
func (a *OAuthServer) Close() { a.srv.Close() }

// AuthURL is the authorization endpoint, where the consent flow starts.
// It grants every request at once: the consent is taken as given.
func (a *OAuthServer) AuthURL() string { return a.srv.URL + "/auth" }

// TokenURL is where connections refresh their tokens.
func (a *OAuthServer) TokenURL() string { return a.srv.URL + "/token" }

// ClientCredentials are the client's id and secret, as the back office
// writes them into a connection's secret.
func (a *OAuthServer) ClientCredentials() (id, secret string) { return a.clientID, a.clientSecret }

// RefreshCount counts refresh_token grant requests; RefusedCount those
// answered invalid_grant.
func (a *OAuthServer) RefreshCount() int64 { return a.refreshes.Load() }

// RefusedCount counts the refresh_token grant requests answered
// invalid_grant.
func (a *OAuthServer) RefusedCount() int64 { return a.refused.Load() }

// authorizeEndpoint grants every requested scope to a fixed resource owner:
// the consent the host's back office collects.
func (a *OAuthServer) authorizeEndpoint(w http.ResponseWriter, r *http.Request) {
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

func (a *OAuthServer) tokenEndpoint(w http.ResponseWriter, r *http.Request) {
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

// Connect runs the authorization code flow as the back office does after
// the consent screen and returns the tokens it got.
func (a *OAuthServer) Connect(ctx context.Context) (*oauth2.Token, error) {
	cfg := a.oauth2Config()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.AuthCodeURL(rand.Text()), nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || loc.Query().Get("code") == "" {
		return nil, fmt.Errorf("authorize answered %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	tok, err := cfg.Exchange(ctx, loc.Query().Get("code"))
	if err != nil {
		return nil, err
	}
	if tok.RefreshToken == "" {
		return nil, errors.New("the code exchange gave no refresh token")
	}
	return tok, nil
}

func (a *OAuthServer) oauth2Config() oauth2.Config {
	return oauth2.Config{ClientID: a.clientID, ClientSecret: a.clientSecret, RedirectURL: a.redirectURL,
		Scopes:   []string{"offline_access", "accounting"},
		Endpoint: oauth2.Endpoint{AuthURL: a.srv.URL + "/auth", TokenURL: a.TokenURL(), AuthStyle: oauth2.AuthStyleInHeader}}
}

// Active reports whether the server still accepts accessToken: the check
// a protected resource makes.
func (a *OAuthServer) Active(accessToken string) bool {
	_, _, err := a.provider.IntrospectToken(context.Background(), accessToken, fosite.AccessToken, &fosite.DefaultSession{})
	return err == nil
}

// Refreshable reports whether the server still honours refreshToken (it
// spends it: call it once, at the end).
func (a *OAuthServer) Refreshable(refreshToken string) bool {
	cfg := a.oauth2Config()
	_, err := cfg.TokenSource(context.Background(), &oauth2.Token{RefreshToken: refreshToken}).Token()
	return err == nil
}
