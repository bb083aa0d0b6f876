// Package credential resolves an integration connection's credential_reference
// to the secret it names in AWS Secrets Manager, enforcing the tenant scope
// rules (docs/architecture.md, Rules: credentials), and caches what it
// resolved per container.
package credential

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
)

// Secret is a secret string. It never prints: fmt, slog and JSON see
// "[redacted]". Call Reveal to use the value.
type Secret struct{ value string }

// NewSecret wraps a secret value.
func NewSecret(v string) Secret { return Secret{value: v} }

// Reveal returns the secret value. Use it only to authenticate a call.
func (s Secret) Reveal() string { return s.value }

// IsZero reports whether the secret is empty.
func (s Secret) IsZero() bool { return s.value == "" }

func (s Secret) String() string               { return "[redacted]" }
func (s Secret) GoString() string             { return "[redacted]" }
func (s Secret) LogValue() slog.Value         { return slog.StringValue("[redacted]") }
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"[redacted]"`), nil }
func (s Secret) MarshalText() ([]byte, error) { return []byte("[redacted]"), nil }

// Credential is the parsed secret JSON
// {"token"?, "signingSecret"?, "signingSecrets"?: [newest, …]}, or its
// OAuth2 shape (see OAuthGrant).
type Credential struct {
	// Token is "token"; for an OAuth2 secret, the access token once
	// Resolver.ResolveConnection has made sure it is fresh.
	Token Secret
	// SigningSecret is "signingSecret"; zero when absent or empty.
	SigningSecret Secret
	// SigningSecrets is "signingSecrets", newest first: during a rotation
	// every call is signed with each of them.
	SigningSecrets []Secret
	// OAuth is the OAuth2 grant of an OAuth2 secret; nil for the other shape.
	OAuth *OAuthGrant
}

// SigningKeys returns every secret a call is signed with, newest first and
// without duplicates: the "signingSecrets" list in its order, then
// "signingSecret" unless the list already holds it.
func (c Credential) SigningKeys() []Secret {
	var out []Secret
	for _, s := range append(slices.Clip(c.SigningSecrets), c.SigningSecret) {
		if !s.IsZero() && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// Values returns the non-empty secret values, for masking them out of texts:
// the token, every signing secret and, for a "whsec_" secret, its base64
// text and the key it decodes to.
func (c Credential) Values() []string {
	var out []string
	add := func(v string) {
		if v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	add(c.Token.value)
	if g := c.OAuth; g != nil {
		add(g.ClientSecret.value)
		add(g.RefreshToken.value)
		add(g.AccessToken.value)
	}
	for _, s := range c.SigningKeys() {
		add(s.value)
		if encoded, ok := strings.CutPrefix(s.value, StandardWebhooksPrefix); ok {
			add(encoded)
			if key, err := s.StandardWebhooksKey(); err == nil {
				add(string(key))
			}
		}
	}
	return out
}

// StandardWebhooksPrefix marks a signing secret in the Standard Webhooks
// form "whsec_<base64 key>".
const StandardWebhooksPrefix = "whsec_"

// StandardWebhooksKey returns the HMAC key of the Standard Webhooks
// "webhook-signature" header for s: the base64-decoded (standard alphabet,
// padded) text after "whsec_" when s starts with it, else s's UTF-8 bytes.
// Its errors never quote the secret.
func (s Secret) StandardWebhooksKey() ([]byte, error) {
	encoded, ok := strings.CutPrefix(s.value, StandardWebhooksPrefix)
	if !ok {
		return []byte(s.value), nil
	}
	key, err := base64.StdEncoding.DecodeString(encoded)
	switch {
	case err != nil:
		return nil, errors.New(`the text after "whsec_" is not valid base64`)
	case len(key) == 0:
		return nil, errors.New(`the key after "whsec_" is empty`)
	}
	return key, nil
}

// parseCredential decodes a SecretString holding the JSON object
// {"token"?: string, "signingSecret"?: string, "signingSecrets"?: [string, …]},
// or the OAuth2 shape (parseOAuthGrant) when any of its fields is present.
// Keys are case-sensitive, unknown keys are ignored and null counts as
// absent; an empty "token" or "signingSecret" counts as absent too. A
// "signingSecrets" list must hold at least one secret, each a non-empty
// string, and every signing secret that starts with "whsec_" must carry a
// non-empty base64 key. Its errors never quote the secret text: they name at
// most a known key and an index.
func parseCredential(secretString string) (Credential, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(secretString), &fields); err != nil || fields == nil {
		// err's text may quote bytes of the secret: drop it.
		return Credential{}, errors.New("secret value is not a JSON object")
	}
	if isOAuthShape(fields) {
		g, err := parseOAuthGrant(fields)
		if err != nil {
			return Credential{}, err
		}
		return Credential{OAuth: &g}, nil
	}
	var c Credential
	for _, f := range []struct {
		key string
		dst *Secret
	}{{"token", &c.Token}, {"signingSecret", &c.SigningSecret}} {
		raw, ok := fields[f.key]
		if !ok {
			continue
		}
		var v *string
		if err := json.Unmarshal(raw, &v); err != nil {
			return Credential{}, fmt.Errorf("secret value field %q is not a string", f.key)
		}
		if v != nil {
			*f.dst = NewSecret(*v)
		}
	}
	if _, err := c.SigningSecret.StandardWebhooksKey(); err != nil {
		return Credential{}, fmt.Errorf("secret value field %q: %w", "signingSecret", err)
	}

	if raw, ok := fields["signingSecrets"]; ok {
		var list []json.RawMessage
		if err := json.Unmarshal(raw, &list); err != nil {
			return Credential{}, errors.New(`secret value field "signingSecrets" is not a list`)
		}
		if list != nil && len(list) == 0 {
			return Credential{}, errors.New(`secret value field "signingSecrets" is an empty list`)
		}
		for i, item := range list {
			var v *string
			if err := json.Unmarshal(item, &v); err != nil || v == nil {
				return Credential{}, fmt.Errorf(`secret value field "signingSecrets[%d]" is not a string`, i)
			}
			s := NewSecret(*v)
			if s.IsZero() {
				return Credential{}, fmt.Errorf(`secret value field "signingSecrets[%d]" is empty`, i)
			}
			if _, err := s.StandardWebhooksKey(); err != nil {
				return Credential{}, fmt.Errorf(`secret value field "signingSecrets[%d]": %w`, i, err)
			}
			c.SigningSecrets = append(c.SigningSecrets, s)
		}
	}
	return c, nil
}

// ErrRejected marks a credential reference that can never resolve as it is:
// outside the prefix, wrong region/account, tagged for another organization,
// missing, or not JSON. Permanent: conflict_type credential_rejected.
var ErrRejected = errors.New("credential rejected")

// ErrUnavailable marks a failure to reach Secrets Manager (network, 5xx,
// throttling). Retryable.
var ErrUnavailable = errors.New("secrets manager unavailable")
