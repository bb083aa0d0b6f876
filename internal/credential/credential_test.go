package credential

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestParseCredential(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, secret           string
		wantToken, wantSigning string
		wantKeys               []string // SigningKeys; nil = just wantSigning, if any
		wantErr                string   // "" = valid
	}{
		{name: "both", secret: `{"token":"tok","signingSecret":"sig"}`, wantToken: "tok", wantSigning: "sig"},
		{name: "token only", secret: `{"token":"tok"}`, wantToken: "tok"},
		{name: "signing secret only", secret: `{"signingSecret":"sig"}`, wantSigning: "sig"},
		{name: "empty object", secret: `{}`},
		{name: "unknown keys ignored", secret: `{"token":"tok","extra":{"a":[1,2]},"n":3}`, wantToken: "tok"},
		{name: "null is absent", secret: `{"token":null,"signingSecret":"sig"}`, wantSigning: "sig"},
		{name: "keys are case-sensitive", secret: `{"Token":"x","SIGNINGSECRET":"y"}`},
		{name: "surrounding whitespace", secret: " \n{\"token\":\"tok\"}\n", wantToken: "tok"},
		{name: "escapes", secret: `{"token":"a\"b\u00e9"}`, wantToken: `a"bé`},
		{name: "plain text", secret: `hunter2-plain-text`, wantErr: "secret value is not a JSON object"},
		{name: "empty", secret: ``, wantErr: "secret value is not a JSON object"},
		{name: "JSON null", secret: `null`, wantErr: "secret value is not a JSON object"},
		{name: "JSON array", secret: `["tok"]`, wantErr: "secret value is not a JSON object"},
		{name: "JSON string", secret: `"tok"`, wantErr: "secret value is not a JSON object"},
		{name: "truncated", secret: `{"token":"hunter2`, wantErr: "secret value is not a JSON object"},
		{name: "trailing data", secret: `{"token":"tok"} hunter2`, wantErr: "secret value is not a JSON object"},
		{name: "token is a number", secret: `{"token":12345}`, wantErr: `secret value field "token" is not a string`},
		{name: "signing secret is an object", secret: `{"signingSecret":{"v":"hunter2"}}`, wantErr: `secret value field "signingSecret" is not a string`},
		{name: "whsec signing secret", secret: `{"signingSecret":"whsec_aHVudGVyMg=="}`, wantSigning: "whsec_aHVudGVyMg=="},
		{name: "whsec signing secret not base64", secret: `{"signingSecret":"whsec_hunter2!"}`, wantErr: `secret value field "signingSecret": the text after "whsec_" is not valid base64`},
		{name: "whsec signing secret unpadded", secret: `{"signingSecret":"whsec_aHVudGVyMg"}`, wantErr: `secret value field "signingSecret": the text after "whsec_" is not valid base64`},
		{name: "whsec signing secret empty key", secret: `{"signingSecret":"whsec_"}`, wantErr: `secret value field "signingSecret": the key after "whsec_" is empty`},
		{name: "signing secrets", secret: `{"signingSecrets":["new","whsec_aHVudGVyMg=="]}`, wantKeys: []string{"new", "whsec_aHVudGVyMg=="}},
		{name: "signing secrets beside signing secret", secret: `{"signingSecret":"old","signingSecrets":["new"]}`, wantSigning: "old", wantKeys: []string{"new", "old"}},
		{name: "duplicates dropped", secret: `{"signingSecret":"b","signingSecrets":["a","b","a"]}`, wantSigning: "b", wantKeys: []string{"a", "b"}},
		{name: "signing secrets null is absent", secret: `{"signingSecrets":null,"signingSecret":"sig"}`, wantSigning: "sig"},
		{name: "signing secrets empty list", secret: `{"signingSecrets":[]}`, wantErr: `secret value field "signingSecrets" is an empty list`},
		{name: "signing secrets not a list", secret: `{"signingSecrets":"hunter2"}`, wantErr: `secret value field "signingSecrets" is not a list`},
		{name: "signing secrets entry a number", secret: `{"signingSecrets":["hunter2",7]}`, wantErr: `secret value field "signingSecrets[1]" is not a string`},
		{name: "signing secrets entry null", secret: `{"signingSecrets":[null,"hunter2"]}`, wantErr: `secret value field "signingSecrets[0]" is not a string`},
		{name: "signing secrets entry empty", secret: `{"signingSecrets":["hunter2",""]}`, wantErr: `secret value field "signingSecrets[1]" is empty`},
		{name: "signing secrets entry bad whsec", secret: `{"signingSecrets":["hunter2","whsec_hunter2*"]}`, wantErr: `secret value field "signingSecrets[1]": the text after "whsec_" is not valid base64`},
		{name: "signing secrets entry empty whsec", secret: `{"signingSecrets":["whsec_"]}`, wantErr: `secret value field "signingSecrets[0]": the key after "whsec_" is empty`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := parseCredential(tt.secret)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("parseCredential error = %v, want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Fatalf("error %q quotes the secret", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseCredential: %v", err)
			}
			if c.Token.Reveal() != tt.wantToken || c.SigningSecret.Reveal() != tt.wantSigning {
				t.Fatalf("got token %q signingSecret %q, want %q %q", c.Token.Reveal(), c.SigningSecret.Reveal(), tt.wantToken, tt.wantSigning)
			}
			wantKeys := tt.wantKeys
			if wantKeys == nil && tt.wantSigning != "" {
				wantKeys = []string{tt.wantSigning}
			}
			var keys []string
			for _, k := range c.SigningKeys() {
				keys = append(keys, k.Reveal())
			}
			if !slices.Equal(keys, wantKeys) {
				t.Fatalf("SigningKeys = %q, want %q", keys, wantKeys)
			}
		})
	}
}

// parseErrors matches every message parseCredential may return: fixed texts
// and an index, so none can carry the secret.
var parseErrors = regexp.MustCompile(`^(secret value is not a JSON object|` +
	`secret value field "(token|signingSecret)" is not a string|` +
	`secret value field "signingSecrets" is (not a list|an empty list)|` +
	`secret value field "signingSecrets\[[0-9]+\]" is (not a string|empty)|` +
	`secret value field "(signingSecret|signingSecrets\[[0-9]+\])": the (text after "whsec_" is not valid base64|key after "whsec_" is empty)|` +
	`secret value field "(token|signingSecret|signingSecrets)" cannot be combined with the OAuth2 fields \(clientId, clientSecret, refreshToken\)|` +
	`secret value field "(clientId|clientSecret|refreshToken)" is missing or empty \(an OAuth2 secret needs clientId, clientSecret and refreshToken\)|` +
	`secret value field "(clientId|clientSecret|refreshToken|accessToken|accessTokenExpiresAt)" is not a string|` +
	`secret value field "accessTokenExpiresAt" is not an RFC 3339 time \(e.g. 2026-01-02T15:04:05Z\))$`)

func FuzzParseCredential(f *testing.F) {
	for _, seed := range []string{
		`{"token":"tok","signingSecret":"sig"}`,
		`{}`, `null`, `[]`, `"x"`, `{"token":1}`, `{"signingSecret":null}`,
		`{"token":"a","token":"b"}`, `{"token":"\ud800"}`, "{\"token\":\"\xff\"}", `not json`,
		`{"signingSecrets":["a","whsec_AA=="]}`, `{"signingSecrets":[]}`, `{"signingSecrets":[1]}`, `{"signingSecret":"whsec_!"}`,
		`{"clientId":"c","clientSecret":"s","refreshToken":"r","accessToken":"a","accessTokenExpiresAt":"2026-01-02T15:04:05Z"}`,
		`{"clientId":"c","clientSecret":"s","refreshToken":"r","accessTokenExpiresAt":"2026-01-02"}`,
		`{"clientId":"c","refreshToken":""}`, `{"accessToken":7}`, `{"clientId":"c","clientSecret":"s","refreshToken":"r","token":"t"}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, secret string) {
		c, err := parseCredential(secret)
		if err != nil {
			if !parseErrors.MatchString(err.Error()) {
				t.Fatalf("parseCredential(%q) returned an unexpected message %q", secret, err)
			}
			return
		}
		if !json.Valid([]byte(secret)) {
			t.Fatalf("parseCredential accepted invalid JSON %q", secret)
		}
		for _, v := range c.Values() {
			if v == "" {
				t.Fatal("Values returned an empty secret")
			}
		}
	})
}

func TestCredentialRedacted(t *testing.T) {
	t.Parallel()
	c := Credential{Token: NewSecret("tok-TOPSECRET"), SigningSecret: NewSecret("sig-TOPSECRET")}

	var outputs []string
	for _, format := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
		outputs = append(outputs,
			fmt.Sprintf(format, c), fmt.Sprintf(format, &c),
			fmt.Sprintf(format, c.Token), fmt.Sprintf(format, []Secret{c.SigningSecret}))
	}
	for _, value := range []any{c, &c, c.Token, map[string]Secret{"k": c.Token}} {
		b, err := json.Marshal(value)
		if err != nil {
			t.Fatalf("json.Marshal: %v", err)
		}
		outputs = append(outputs, string(b))
	}
	var logs bytes.Buffer
	for _, h := range []slog.Handler{slog.NewJSONHandler(&logs, nil), slog.NewTextHandler(&logs, nil)} {
		slog.New(h).Info("resolved", "credential", c, "token", c.Token, "ptr", &c, slog.Any("signing", c.SigningSecret))
	}
	outputs = append(outputs, logs.String())

	for _, out := range outputs {
		if strings.Contains(out, "TOPSECRET") {
			t.Errorf("secret leaked: %s", out)
		}
		if !strings.Contains(out, "[redacted]") {
			t.Errorf("no [redacted] in: %s", out)
		}
	}
	if c.Token.Reveal() != "tok-TOPSECRET" {
		t.Fatal("Reveal lost the value")
	}
}

func TestCredentialValuesCoverEverySigningSecretAndWhsecKey(t *testing.T) {
	t.Parallel()
	// "whsec_" + base64("TOPSECRET-KEY")
	c, err := parseCredential(`{"token":"tok","signingSecret":"old","signingSecrets":["whsec_VE9QU0VDUkVULUtFWQ==","old"]}`)
	if err != nil {
		t.Fatalf("parseCredential: %v", err)
	}
	got := c.Values()
	want := []string{"tok", "whsec_VE9QU0VDUkVULUtFWQ==", "VE9QU0VDUkVULUtFWQ==", "TOPSECRET-KEY", "old"}
	if !slices.Equal(got, want) {
		t.Fatalf("Values = %q, want %q", got, want)
	}
	key, err := c.SigningKeys()[0].StandardWebhooksKey()
	if err != nil || string(key) != "TOPSECRET-KEY" {
		t.Fatalf("StandardWebhooksKey = %q, %v; want the decoded key", key, err)
	}
	if key, _ := NewSecret("plain").StandardWebhooksKey(); string(key) != "plain" {
		t.Fatalf("StandardWebhooksKey of a plain secret = %q, want its UTF-8 bytes", key)
	}
}
