package push

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// Fuzz targets for the push worker's decoders of outside input: the error
// texts providers hand back (stored in last_error). Their seeds run as ordinary
// tests; `go test -fuzz FuzzX ./internal/push/` explores.

// FuzzCleanErrorNeverKeepsASecret: whatever a provider's error text holds,
// the stored text contains no secret value, even when the text splits it
// with bytes PostgreSQL cannot store.
func FuzzCleanErrorNeverKeepsASecret(f *testing.F) {
	f.Add("denied for tok-abc123", "tok-abc123", 3)
	f.Add("denied for tok-a\x00bc123", "tok-abc123", 0)
	f.Add("tok-abc123"+strings.Repeat("é", 1200), "tok-abc123", 500)
	f.Add("\xff\xfe"+strings.Repeat("x", 995), "sig-XYZ", 999)
	f.Add("ssecretsecrett", "secret", 1)
	f.Add(`{"error":"bad token tok\/SECRET+abc=="}`, "tok/SECRET+abc==", 0)
	f.Add("got sig-SECRET-\\u00e9\\u003c and "+strings.Repeat("x", 990), "sig-SECRET-é<&>", 5)
	f.Add("0ڴ&000", "ڴ&000", 1) // found by CI's fuzzing: \u escapes and HTML escaping together
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
		// And once in each encoding a provider may echo it in.
		forms := encodedForms(secret)
		for _, f := range forms {
			if strings.ContainsAny(f, "[]") || strings.Contains("[redacted]", f) {
				return // masking could write this form back
			}
		}
		text += " " + strings.Join(forms, " ")
		got := cleanError(text, []string{secret})
		if strings.Contains(got, secret) {
			t.Fatalf("cleanError(%q, %q) = %q keeps the secret", text, secret, got)
		}
		for _, f := range forms {
			if strings.Contains(got, f) {
				t.Fatalf("cleanError(%q, %q) = %q keeps the secret's form %q", text, secret, got, f)
			}
		}
		if !utf8.ValidString(got) || strings.Contains(got, "\x00") || utf8.RuneCountInString(got) > MaxLastError {
			t.Fatalf("cleanError(%q) = %q is not storable", text, got)
		}
	})
}

// encodedForms returns the ways a provider may echo v back, written here
// independently of the masking code: as encoding/json writes it, with "\/"
// for '/' and \uXXXX for non-ASCII (PHP's json_encode), URL-encoded (query
// and path) and base64.
func encodedForms(v string) []string {
	goJSON, _ := json.Marshal(v)
	var php strings.Builder
	for _, r := range string(goJSON[1 : len(goJSON)-1]) {
		switch {
		case r == '/':
			php.WriteString(`\/`)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&php, `\u%04x\u%04x`, r1, r2)
		case r > 0x7e:
			fmt.Fprintf(&php, `\u%04x`, r)
		default:
			php.WriteRune(r)
		}
	}
	return []string{string(goJSON[1 : len(goJSON)-1]), php.String(), url.QueryEscape(v), url.PathEscape(v),
		base64.StdEncoding.EncodeToString([]byte(v))}
}
