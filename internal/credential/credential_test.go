package credential

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestParseCredential(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, secret           string
		wantToken, wantSigning string
		wantErr                string // "" = valid
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
		})
	}
}

// parseErrors is every message parseCredential may return: fixed texts, so
// none can carry the secret.
var parseErrors = map[string]bool{
	"secret value is not a JSON object":                  true,
	`secret value field "token" is not a string`:         true,
	`secret value field "signingSecret" is not a string`: true,
}

func FuzzParseCredential(f *testing.F) {
	for _, seed := range []string{
		`{"token":"tok","signingSecret":"sig"}`,
		`{}`, `null`, `[]`, `"x"`, `{"token":1}`, `{"signingSecret":null}`,
		`{"token":"a","token":"b"}`, `{"token":"\ud800"}`, "{\"token\":\"\xff\"}", `not json`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, secret string) {
		c, err := parseCredential(secret)
		if err != nil {
			if !parseErrors[err.Error()] {
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
