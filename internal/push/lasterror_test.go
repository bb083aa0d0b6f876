package push

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCleanError(t *testing.T) {
	long := strings.Repeat("é", 1500)
	for _, tc := range []struct {
		name, in string
		secrets  []string
		check    func(string) bool
	}{
		{"short text unchanged", "boom", nil, func(s string) bool { return s == "boom" }},
		{"secret masked", "got token tok-123 in body; again tok-123", []string{"tok-123", ""},
			func(s string) bool { return !strings.Contains(s, "tok-123") && strings.Count(s, "[redacted]") == 2 }},
		{"truncated to 1000 characters, not bytes", long, nil,
			func(s string) bool { return utf8.RuneCountInString(s) == 1000 && utf8.ValidString(s) }},
		{"binary made valid", "a\xff\xfeb\x00c", nil, func(s string) bool { return utf8.ValidString(s) && !strings.Contains(s, "\x00") }},
		{"secret masked before truncation", strings.Repeat("x", 995) + "SECRETVALUE", []string{"SECRETVALUE"},
			func(s string) bool { return !strings.Contains(s, "SECRET") }},
	} {
		if got := cleanError(tc.in, tc.secrets); !tc.check(got) {
			t.Errorf("%s: cleanError = %q", tc.name, got)
		}
	}
}

func FuzzCleanError(f *testing.F) {
	f.Add("error", "secret")
	f.Add("\xff\x00"+strings.Repeat("z", 2000), "z")
	f.Fuzz(func(t *testing.T, text, secret string) {
		got := cleanError(text, []string{secret})
		if !utf8.ValidString(got) || utf8.RuneCountInString(got) > MaxLastError || strings.Contains(got, "\x00") {
			t.Fatalf("cleanError(%q) = %q", text, got)
		}
	})
}

// TestCleanErrorMasksEncodedSecrets: a secret echoed JSON-escaped (as PHP
// writes it, "\/" for '/'), URL-encoded or base64'd is masked like a raw one.
func TestCleanErrorMasksEncodedSecrets(t *testing.T) {
	const secret = "tok/SECRET+abc=="
	for _, echo := range []string{
		`{"error":"bad token tok\/SECRET+abc=="}`,
		"GET /check?token=tok%2FSECRET%2Babc%3D%3D failed",
		"path /tokens/tok%2FSECRET+abc== unknown",
		"Basic dG9rL1NFQ1JFVCthYmM9PQ== refused",
	} {
		got := cleanError(echo, []string{secret})
		if !strings.Contains(got, "[redacted]") || strings.Contains(got, "SECRET") || strings.Contains(got, "dG9rL1NFQ1JFVCthYmM9PQ") {
			t.Errorf("cleanError(%q) = %q", echo, got)
		}
	}
}
