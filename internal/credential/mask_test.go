package credential

import (
	"strings"
	"testing"
)

func TestMaskEncodings(t *testing.T) {
	t.Parallel()
	const token = "ab/cd+ef=="      // base64 with '/', '+' and padding
	const signing = "sé<&>\x01\"\\" // non-ASCII, HTML characters, a control character, quote, backslash
	for _, tc := range []struct{ name, echo string }{
		{"raw", token},
		{"JSON with \\/ (PHP)", `ab\/cd+ef==`},
		{"URL query", "ab%2Fcd%2Bef%3D%3D"},
		{"URL query, lower-case hex", "ab%2fcd%2bef%3d%3d"},
		{"URL path", "ab%2Fcd+ef=="},
		{"base64", "YWIvY2QrZWY9PQ=="},
		{"base64 URL alphabet, unpadded", "YWIvY2QrZWY9PQ"},
		{"encoding/json", `sé\u003c\u0026\u003e\u0001\"\\`},
		{"encoding/json without HTML escaping", `sé<&>\u0001\"\\`},
		{"PHP json_encode", `s\u00e9<&>\u0001\"\\`},
		{"\\u escapes, upper-case hex", `s\u00E9<&>\u0001\"\\`},
		{"\\u escapes with HTML escaping", `s\u00e9\u003c\u0026\u003e\u0001\"\\`},
		{"\\u escapes with HTML escaping, upper-case hex", `s\u00E9\u003C\u0026\u003E\u0001\"\\`},
		{"raw signing secret", signing},
	} {
		got := Mask("before "+tc.echo+" after", token, signing)
		if got != "before [redacted] after" {
			t.Errorf("%s: Mask(%q) = %q", tc.name, tc.echo, got)
		}
	}
	c := Credential{Token: NewSecret(token), SigningSecret: NewSecret(signing)}
	if got := c.Mask(`{"error":"token ab\/cd+ef== refused"}`); strings.Contains(got, "cd+ef") {
		t.Errorf("Credential.Mask = %q", got)
	}
	if got := Mask("nothing to hide", "", "absent"); got != "nothing to hide" {
		t.Errorf("Mask without a match = %q", got)
	}
}
