package credential

import (
	"context"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"integration-outbox/internal/testenv"
)

// authServer is testenv's fosite server (a real OAuth2 authorization server
// in process, refresh token rotation and reuse detection on, no grace
// period) as the tests' oauthServer.
type authServer struct{ *testenv.OAuthServer }

// newAuthServer starts a fosite server whose access tokens live
// accessLifespan.
func newAuthServer(t *testing.T, accessLifespan time.Duration) *authServer {
	t.Helper()
	s, err := testenv.NewOAuthServer(accessLifespan)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return &authServer{s}
}

func (a *authServer) clientCredentials() (id, secret string) { return a.ClientCredentials() }
func (a *authServer) refreshCount() int64                    { return a.RefreshCount() }
func (a *authServer) refusedCount() int64                    { return a.RefusedCount() }
func (a *authServer) active(accessToken string) bool         { return a.Active(accessToken) }
func (a *authServer) refreshable(refreshToken string) bool   { return a.Refreshable(refreshToken) }

// connect runs the authorization code flow as the back office does.
func (a *authServer) connect(t *testing.T) *oauth2.Token {
	t.Helper()
	tok, err := a.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
