package credential

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"
)

// OAuthGrant is the OAuth2 shape of a secret,
// {"clientId", "clientSecret", "refreshToken", "accessToken"?,
// "accessTokenExpiresAt"?}, as the host's back office writes it after its
// consent flow and as the push function writes it back after a refresh.
type OAuthGrant struct {
	ClientID     string
	ClientSecret Secret
	RefreshToken Secret
	// AccessToken is zero when the secret holds none yet.
	AccessToken Secret
	// AccessTokenExpiresAt is zero when the secret does not say: the access
	// token is then treated as expired.
	AccessTokenExpiresAt time.Time
	// AccessTokenIssuedAt is when the access token was obtained
	// ("accessTokenIssuedAt", written by the refresh and by outboxctl
	// connect); with the expiry it gives the token's lifetime, which sets
	// the refresh margin (RefreshMargin). When the secret does not say,
	// the resolver takes the secret version's creation date.
	AccessTokenIssuedAt time.Time
}

// oauthKeys are the fields that make a secret an OAuth2 one.
var oauthKeys = []string{"clientId", "clientSecret", "refreshToken", "accessToken", "accessTokenExpiresAt", "accessTokenIssuedAt"}

// isOAuthShape reports whether a decoded secret object has any OAuth2 field.
func isOAuthShape(fields map[string]json.RawMessage) bool {
	for _, k := range oauthKeys {
		if _, ok := fields[k]; ok {
			return true
		}
	}
	return false
}

// parseOAuthGrant decodes the OAuth2 fields of a secret object.
// "clientId", "clientSecret" and "refreshToken" are required non-empty
// strings; "accessToken" is an optional string and "accessTokenExpiresAt"
// an optional RFC 3339 time. The webhook fields ("token", "signingSecret",
// "signingSecrets") may not be mixed in: a secret is one shape or the other.
// Errors name the field, never its value.
func parseOAuthGrant(fields map[string]json.RawMessage) (OAuthGrant, error) {
	for _, k := range []string{"token", "signingSecret", "signingSecrets"} {
		if _, ok := fields[k]; ok {
			return OAuthGrant{}, fmt.Errorf("secret value field %q cannot be combined with the OAuth2 fields (clientId, clientSecret, refreshToken)", k)
		}
	}
	str := func(key string, required bool) (string, error) {
		raw, ok := fields[key]
		var v *string
		if ok {
			if err := json.Unmarshal(raw, &v); err != nil {
				return "", fmt.Errorf("secret value field %q is not a string", key)
			}
		}
		switch {
		case (v == nil || *v == "") && required:
			return "", fmt.Errorf("secret value field %q is missing or empty (an OAuth2 secret needs clientId, clientSecret and refreshToken)", key)
		case v == nil:
			return "", nil
		}
		return *v, nil
	}
	var g OAuthGrant
	var err error
	if g.ClientID, err = str("clientId", true); err != nil {
		return OAuthGrant{}, err
	}
	for _, f := range []struct {
		key      string
		required bool
		dst      *Secret
	}{{"clientSecret", true, &g.ClientSecret}, {"refreshToken", true, &g.RefreshToken}, {"accessToken", false, &g.AccessToken}} {
		v, err := str(f.key, f.required)
		if err != nil {
			return OAuthGrant{}, err
		}
		*f.dst = NewSecret(v)
	}
	for _, f := range []struct {
		key string
		dst *time.Time
	}{{"accessTokenExpiresAt", &g.AccessTokenExpiresAt}, {"accessTokenIssuedAt", &g.AccessTokenIssuedAt}} {
		at, err := str(f.key, false)
		if err != nil {
			return OAuthGrant{}, err
		}
		if at != "" {
			if *f.dst, err = time.Parse(time.RFC3339, at); err != nil {
				return OAuthGrant{}, fmt.Errorf("secret value field %q is not an RFC 3339 time (e.g. 2026-01-02T15:04:05Z)", f.key)
			}
		}
	}
	return g, nil
}

// oauthSecretJSON is the secret string written back after a refresh.
type oauthSecretJSON struct {
	ClientID             string `json:"clientId"`
	ClientSecret         string `json:"clientSecret"`
	RefreshToken         string `json:"refreshToken"`
	AccessToken          string `json:"accessToken,omitempty"`
	AccessTokenExpiresAt string `json:"accessTokenExpiresAt,omitempty"`
	AccessTokenIssuedAt  string `json:"accessTokenIssuedAt,omitempty"`
}

// SecretJSON encodes g as the connection's secret (the shape the push
// function reads and writes back): what outboxctl connect writes.
func (g OAuthGrant) SecretJSON() string { return g.secretString() }

// secretString encodes g as the secret JSON the back office writes.
func (g OAuthGrant) secretString() string {
	s := oauthSecretJSON{ClientID: g.ClientID, ClientSecret: g.ClientSecret.value,
		RefreshToken: g.RefreshToken.value, AccessToken: g.AccessToken.value}
	if !g.AccessTokenExpiresAt.IsZero() {
		s.AccessTokenExpiresAt = g.AccessTokenExpiresAt.UTC().Format(time.RFC3339)
	}
	if !g.AccessTokenIssuedAt.IsZero() {
		s.AccessTokenIssuedAt = g.AccessTokenIssuedAt.UTC().Format(time.RFC3339)
	}
	b, _ := json.Marshal(s) // strings only: cannot fail
	return string(b)
}

// DefaultRefreshMargin is the most an access token is refreshed before its
// expiry (OAUTH_REFRESH_MARGIN): a call that starts with it must not reach
// the provider expired.
const DefaultRefreshMargin = 2 * time.Minute

// RefreshMarginFraction: a token's refresh margin is at most its lifetime
// divided by this. A token is refreshed the smaller of the configured
// margin and a tenth of its lifetime before it expires, so that a token
// living less than the margin is still used for nine tenths of its life,
// and refreshed once per life, not on every call.
const RefreshMarginFraction = 10

// RefreshMargin is how long before its expiry g's access token is
// refreshed: the smaller of limit and a tenth of its lifetime (from
// AccessTokenIssuedAt to AccessTokenExpiresAt). Without a known lifetime
// it is limit.
func (g OAuthGrant) RefreshMargin(limit time.Duration) time.Duration {
	if g.AccessTokenIssuedAt.IsZero() || !g.AccessTokenIssuedAt.Before(g.AccessTokenExpiresAt) {
		return limit
	}
	return min(limit, g.AccessTokenExpiresAt.Sub(g.AccessTokenIssuedAt)/RefreshMarginFraction)
}

// fresh reports whether g's access token may still be used at now: it is
// set and expires more than its refresh margin (RefreshMargin(limit))
// after now.
func (g OAuthGrant) fresh(now time.Time, limit time.Duration) bool {
	return !g.AccessToken.IsZero() && !g.AccessTokenExpiresAt.IsZero() &&
		now.Add(g.RefreshMargin(limit)).Before(g.AccessTokenExpiresAt)
}

// clientRequestToken derives the PutSecretValue ClientRequestToken of a
// write-back: the hex SHA-256 of the secret id and the new refresh and
// access tokens, cut to 64 characters (Secrets Manager takes 32 to 64). A
// retried write of the same set carries the same token, so Secrets
// Manager creates no second version; a different set gets another one.
func clientRequestToken(secretID string, g OAuthGrant) string {
	h := sha256.New()
	for _, part := range []string{secretID, g.RefreshToken.value, g.AccessToken.value} {
		fmt.Fprintf(h, "%d:%s;", len(part), part)
	}
	return hex.EncodeToString(h.Sum(nil)) // 64 hex characters
}

// Default token URLs per provider, used when config_json has no tokenUrl.
const (
	XeroTokenURL       = "https://identity.xero.com/connect/token"
	QuickBooksTokenURL = "https://oauth.platform.intuit.com/oauth2/v1/tokens/bearer"
)

// tokenURL returns the token endpoint of a connection: config_json's
// "tokenUrl", else the provider's default. It must be an absolute https URL
// (http too when allowPrivate: a local stand-in); the guarded HTTP client
// refuses non-public addresses at connect time.
func tokenURL(providerName string, config json.RawMessage, allowPrivate bool) (string, error) {
	var c struct {
		TokenURL *string `json:"tokenUrl"`
	}
	if len(config) > 0 {
		if err := json.Unmarshal(config, &c); err != nil {
			return "", errors.New(`config_json is not a JSON object with a string "tokenUrl"`)
		}
	}
	raw := ""
	if c.TokenURL != nil {
		raw = *c.TokenURL
	}
	if raw == "" {
		switch providerName {
		case "xero":
			raw = XeroTokenURL
		case "quickbooks":
			raw = QuickBooksTokenURL
		default:
			return "", fmt.Errorf(`config_json has no "tokenUrl" and provider %q has no default token URL`, providerName)
		}
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Host == "" || u.User != nil || u.Fragment != "":
		return "", errors.New(`config_json "tokenUrl" is not an absolute URL without credentials or fragment`)
	case u.Scheme == "https":
	case u.Scheme == "http" && allowPrivate:
	default:
		return "", errors.New(`config_json "tokenUrl" must use https (http only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true)`)
	}
	return u.String(), nil
}
