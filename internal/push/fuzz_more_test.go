package push

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// Fuzz targets for the push worker's decoders of outside input that had
// none: payload_json (written by the host application) and the error texts
// providers hand back (stored in last_error). Their seeds run as ordinary
// tests; `go test -fuzz FuzzX ./internal/push/` explores.

func FuzzExternalSupplierID(f *testing.F) {
	for _, seed := range []string{
		``, `null`, `{}`, `[]`, `"SUP-1"`, `1`, `{"externalSupplierId":"SUP-1"}`, `{"externalSupplierId":null}`,
		`{"externalSupplierId":42}`, `{"externalSupplierId":["SUP-1"]}`, `{"externalSupplierId":{"id":1}}`,
		`{"externalSupplierId":""}`, `{"externalSupplierId":" \t"}`, `{"ExternalSupplierId":"SUP-1"}`,
		`{"externalSupplierId":"a","externalSupplierId":"b"}`, `{"externalSupplierId":"\u0000"}`,
		`{"externalSupplierId":"'; drop table external_integration_outbox; --"}`, `{"externalSupplierId":"\ud800"}`,
		`{"externalSupplierId":"SUP-1","other":{"deep":[1,2,3]}}`, `{"externalSupplierId":"SUP-1"`,
	} {
		f.Add([]byte(seed))
	}
	known := map[string]bool{
		"payload_json: must be a JSON object":                true,
		"payload_json.externalSupplierId: is required":       true,
		"payload_json.externalSupplierId: must be a string":  true,
		"payload_json.externalSupplierId: must not be empty": true,
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		id, err := externalSupplierID(raw)
		if err != nil {
			// The errors are fixed texts: nothing of the payload is echoed.
			if !known[err.Error()] || id != "" {
				t.Fatalf("externalSupplierID(%q) = %q, %v", raw, id, err)
			}
			return
		}
		var obj map[string]any
		if json.Unmarshal(raw, &obj) != nil {
			t.Fatalf("externalSupplierID accepted %q, which is not a JSON object", raw)
		}
		if got, ok := obj["externalSupplierId"].(string); !ok || got != id || strings.TrimSpace(id) == "" {
			t.Fatalf("externalSupplierID(%q) = %q, want the non-blank string externalSupplierId", raw, id)
		}
	})
}

// FuzzCleanErrorNeverKeepsASecret: whatever a provider's error text holds,
// the stored text contains no secret value, even when the text splits it
// with bytes PostgreSQL cannot store.
func FuzzCleanErrorNeverKeepsASecret(f *testing.F) {
	f.Add("denied for tok-abc123", "tok-abc123", 3)
	f.Add("denied for tok-a\x00bc123", "tok-abc123", 0)
	f.Add("tok-abc123"+strings.Repeat("é", 1200), "tok-abc123", 500)
	f.Add("\xff\xfe"+strings.Repeat("x", 995), "sig-XYZ", 999)
	f.Add("ssecretsecrett", "secret", 1)
	f.Fuzz(func(t *testing.T, text, secret string, at int) {
		// A secret can only be kept out of the text when masking cannot
		// write it back: not part of "[redacted]", no bracket, valid UTF-8
		// that survives cleaning as it is.
		if secret == "" || strings.Contains("[redacted]", secret) || strings.ContainsAny(secret, "[]\x00\uFFFD") ||
			!utf8.ValidString(secret) {
			return
		}
		// Plant the secret, and once more split by a NUL byte.
		at = max(0, min(at, len(text)))
		half := len(secret) / 2
		text = text[:at] + secret + text[at:] + secret[:half] + "\x00" + secret[half:]
		got := cleanError(text, []string{secret})
		if strings.Contains(got, secret) {
			t.Fatalf("cleanError(%q, %q) = %q keeps the secret", text, secret, got)
		}
		if !utf8.ValidString(got) || strings.Contains(got, "\x00") || utf8.RuneCountInString(got) > MaxLastError {
			t.Fatalf("cleanError(%q) = %q is not storable", text, got)
		}
	})
}
