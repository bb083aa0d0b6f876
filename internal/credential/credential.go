// Package credential resolves an integration connection's credential_reference
// to the secret it names in AWS Secrets Manager, enforcing the tenant scope
// rules of DESIGN.md, and caches what it resolved per container.
package credential

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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

// Credential is the parsed secret JSON {"token"?, "signingSecret"?}.
type Credential struct {
	Token         Secret
	SigningSecret Secret
}

// Values returns the non-empty secret values, for masking them out of texts.
func (c Credential) Values() []string {
	var out []string
	for _, s := range []Secret{c.Token, c.SigningSecret} {
		if !s.IsZero() {
			out = append(out, s.value)
		}
	}
	return out
}

// parseCredential decodes a SecretString holding the JSON object
// {"token"?: string, "signingSecret"?: string}. Keys are case-sensitive,
// unknown keys are ignored and null counts as absent. Its errors never quote
// the secret text: they name at most one of the two known keys.
func parseCredential(secretString string) (Credential, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(secretString), &fields); err != nil || fields == nil {
		// err's text may quote bytes of the secret: drop it.
		return Credential{}, errors.New("secret value is not a JSON object")
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
	return c, nil
}

// ErrRejected marks a credential reference that can never resolve as it is:
// outside the prefix, wrong region/account, tagged for another organization,
// missing, or not JSON. Permanent: conflict_type credential_rejected.
var ErrRejected = errors.New("credential rejected")

// ErrUnavailable marks a failure to reach Secrets Manager (network, 5xx,
// throttling). Retryable.
var ErrUnavailable = errors.New("secrets manager unavailable")
