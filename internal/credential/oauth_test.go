package credential

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseOAuthSecret(t *testing.T) {
	t.Parallel()
	const full = `{"clientId":"cid","clientSecret":"csec","refreshToken":"rt","accessToken":"at","accessTokenExpiresAt":"2026-01-02T15:04:05Z","accessTokenIssuedAt":"2026-01-02T14:34:05Z"}`
	tests := []struct {
		name, secret string
		wantErr      string
	}{
		{name: "full", secret: full},
		{name: "no access token yet", secret: `{"clientId":"cid","clientSecret":"csec","refreshToken":"rt"}`},
		{name: "null access token", secret: `{"clientId":"cid","clientSecret":"csec","refreshToken":"rt","accessToken":null}`},
		{name: "missing client id", secret: `{"clientSecret":"csec","refreshToken":"rt"}`, wantErr: `field "clientId" is missing or empty`},
		{name: "empty client secret", secret: `{"clientId":"cid","clientSecret":"","refreshToken":"rt"}`, wantErr: `field "clientSecret" is missing or empty`},
		{name: "missing refresh token", secret: `{"clientId":"cid","clientSecret":"csec","accessToken":"at"}`, wantErr: `field "refreshToken" is missing or empty`},
		{name: "refresh token a number", secret: `{"clientId":"cid","clientSecret":"csec","refreshToken":7}`, wantErr: `field "refreshToken" is not a string`},
		{name: "expiry not RFC 3339", secret: `{"clientId":"cid","clientSecret":"csec","refreshToken":"rt","accessTokenExpiresAt":"1767366245"}`, wantErr: `field "accessTokenExpiresAt" is not an RFC 3339 time`},
		{name: "issue time not RFC 3339", secret: `{"clientId":"cid","clientSecret":"csec","refreshToken":"rt","accessTokenIssuedAt":"yesterday"}`, wantErr: `field "accessTokenIssuedAt" is not an RFC 3339 time`},
		{name: "expiry a number", secret: `{"clientId":"cid","clientSecret":"csec","refreshToken":"rt","accessTokenExpiresAt":1767366245}`, wantErr: `field "accessTokenExpiresAt" is not a string`},
		{name: "mixed with token", secret: `{"token":"tok","clientId":"cid","clientSecret":"csec","refreshToken":"rt"}`, wantErr: `field "token" cannot be combined with the OAuth2 fields`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := parseCredential(tt.secret)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				for _, v := range []string{"csec", "rt", "at", "1767366245"} {
					if strings.Contains(err.Error(), `"`+v+`"`) || strings.Contains(err.Error(), " "+v) {
						t.Errorf("error %q quotes a secret value %q", err, v)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			g := c.OAuth
			if g == nil || g.ClientID != "cid" || g.ClientSecret.Reveal() != "csec" || g.RefreshToken.Reveal() != "rt" {
				t.Fatalf("grant = %+v", g)
			}
			if !c.Token.IsZero() {
				t.Errorf("Token is set before any refresh")
			}
		})
	}

	c, err := parseCredential(full)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC); !c.OAuth.AccessTokenExpiresAt.Equal(want) || c.OAuth.AccessToken.Reveal() != "at" {
		t.Errorf("access token = %q expiring %v, want at %v", c.OAuth.AccessToken.Reveal(), c.OAuth.AccessTokenExpiresAt, want)
	}
	if want := time.Date(2026, 1, 2, 14, 34, 5, 0, time.UTC); !c.OAuth.AccessTokenIssuedAt.Equal(want) {
		t.Errorf("access token issued %v, want %v", c.OAuth.AccessTokenIssuedAt, want)
	}
	for _, v := range []string{"csec", "rt", "at"} {
		if !strings.Contains(strings.Join(c.Values(), " "), v) {
			t.Errorf("Values() misses %q: it would not be masked out of texts", v)
		}
	}
	// The written-back JSON parses to the same grant.
	back, err := parseCredential(c.OAuth.secretString())
	if err != nil || *back.OAuth != *c.OAuth {
		t.Errorf("round trip = %+v, %v; want %+v", back.OAuth, err, c.OAuth)
	}
}

func TestOAuthGrantFresh(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		token   string
		expires time.Time
		want    bool
	}{
		{"well before expiry", "at", now.Add(30 * time.Minute), true},
		{"just outside the margin", "at", now.Add(2*time.Minute + time.Second), true},
		{"exactly at the margin", "at", now.Add(2 * time.Minute), false},
		{"inside the margin", "at", now.Add(time.Minute), false},
		{"expired", "at", now.Add(-time.Minute), false},
		{"no expiry known", "at", time.Time{}, false},
		{"no access token", "", now.Add(time.Hour), false},
	}
	for _, tt := range tests {
		g := OAuthGrant{AccessToken: NewSecret(tt.token), AccessTokenExpiresAt: tt.expires}
		if got := g.fresh(now, DefaultRefreshMargin); got != tt.want {
			t.Errorf("%s: fresh = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// The refresh margin is the smaller of the configured one and a tenth of
// the token's lifetime; without a known lifetime, the configured one.
func TestRefreshMarginAdaptsToTheLifetime(t *testing.T) {
	t.Parallel()
	issued := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		issued   time.Time
		lifetime time.Duration
		want     time.Duration
	}{
		{"Xero, 30 minutes", issued, 30 * time.Minute, 2 * time.Minute},
		{"QuickBooks, 60 minutes", issued, time.Hour, 2 * time.Minute},
		{"5 minutes", issued, 5 * time.Minute, 30 * time.Second},
		{"20 seconds", issued, 20 * time.Second, 2 * time.Second},
		{"lifetime unknown", time.Time{}, 20 * time.Second, 2 * time.Minute},
		{"issued after its expiry", issued.Add(time.Minute), 20 * time.Second, 2 * time.Minute},
	}
	for _, tt := range tests {
		g := OAuthGrant{AccessToken: NewSecret("at"), AccessTokenIssuedAt: tt.issued, AccessTokenExpiresAt: issued.Add(tt.lifetime)}
		if got := g.RefreshMargin(DefaultRefreshMargin); got != tt.want {
			t.Errorf("%s: margin = %v, want %v", tt.name, got, tt.want)
		}
		// Fresh until the margin, stale from it.
		exp := g.AccessTokenExpiresAt
		if !g.fresh(exp.Add(-tt.want-time.Second), DefaultRefreshMargin) || g.fresh(exp.Add(-tt.want), DefaultRefreshMargin) {
			t.Errorf("%s: not fresh up to %v before its expiry, stale from then", tt.name, tt.want)
		}
	}
}

func TestClientRequestToken(t *testing.T) {
	t.Parallel()
	g := OAuthGrant{ClientID: "cid", ClientSecret: NewSecret("cs"), RefreshToken: NewSecret("rt2"), AccessToken: NewSecret("at2")}
	a := clientRequestToken("arn:aws:secretsmanager:us-east-1:123456789012:secret:integrations/x", g)
	if len(a) < 32 || len(a) > 64 {
		t.Fatalf("token %q has %d characters, Secrets Manager takes 32 to 64", a, len(a))
	}
	if b := clientRequestToken("arn:aws:secretsmanager:us-east-1:123456789012:secret:integrations/x", g); a != b {
		t.Errorf("not deterministic: %q then %q", a, b)
	}
	for name, other := range map[string]string{
		"another secret":        clientRequestToken("arn:aws:secretsmanager:us-east-1:123456789012:secret:integrations/y", g),
		"another refresh token": clientRequestToken("arn:aws:secretsmanager:us-east-1:123456789012:secret:integrations/x", OAuthGrant{RefreshToken: NewSecret("rt3"), AccessToken: g.AccessToken}),
		"another access token":  clientRequestToken("arn:aws:secretsmanager:us-east-1:123456789012:secret:integrations/x", OAuthGrant{RefreshToken: g.RefreshToken, AccessToken: NewSecret("at3")}),
		"shifted boundaries":    clientRequestToken("arn:aws:secretsmanager:us-east-1:123456789012:secret:integrations/x", OAuthGrant{RefreshToken: NewSecret("rt2a"), AccessToken: NewSecret("t2")}),
	} {
		if other == a {
			t.Errorf("%s: same token %q", name, a)
		}
	}
	for _, v := range []string{"rt2", "at2"} {
		if strings.Contains(a, v) {
			t.Errorf("token %q holds the secret value %q", a, v)
		}
	}
}

func TestTokenURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, provider, config string
		allowPrivate           bool
		want, wantErr          string
	}{
		{name: "xero default", provider: "xero", config: `{"tenantId":"t"}`, want: XeroTokenURL},
		{name: "quickbooks default", provider: "quickbooks", config: `{}`, want: QuickBooksTokenURL},
		{name: "no config", provider: "xero", want: XeroTokenURL},
		{name: "configured", provider: "xero", config: `{"tokenUrl":"https://id.example.com/token"}`, want: "https://id.example.com/token"},
		{name: "http refused", provider: "xero", config: `{"tokenUrl":"http://127.0.0.1:9/token"}`, wantErr: "must use https"},
		{name: "http allowed locally", provider: "xero", config: `{"tokenUrl":"http://127.0.0.1:9/token"}`, allowPrivate: true, want: "http://127.0.0.1:9/token"},
		{name: "credentials in URL", provider: "xero", config: `{"tokenUrl":"https://u:p@id.example.com/token"}`, wantErr: "without credentials"},
		{name: "relative", provider: "xero", config: `{"tokenUrl":"/token"}`, wantErr: "not an absolute URL"},
		{name: "not a string", provider: "xero", config: `{"tokenUrl":7}`, wantErr: `"tokenUrl"`},
		{name: "other provider", provider: "webhook", config: `{}`, wantErr: "no default token URL"},
	}
	for _, tt := range tests {
		got, err := tokenURL(tt.provider, json.RawMessage(tt.config), tt.allowPrivate)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error = %v, want %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}

// The connection_unauthorized conflict has one owner, internal/health: it
// opens it (health.MarkUnauthorized), keeps its id and resolves it
// (health.Reauthorized, or the first call that goes through). This package
// asks it and writes no conflict of its own.
func TestTheUnauthorizedConflictIsHealthsAlone(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "external_integration_conflicts") {
			t.Errorf("%s reads or writes external_integration_conflicts: the connection's conflict is internal/health's", name)
		}
	}
}
