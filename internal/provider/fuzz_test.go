package provider

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"integration-outbox/internal/credential"
)

// Fuzz targets for every decoder of outside input: the webhook's and the
// sandbox's config_json, and a webhook's response. Their seeds run as
// ordinary tests; `go test -fuzz FuzzX ./internal/provider/` explores.

func FuzzParseWebhookConfig(f *testing.F) {
	for _, seed := range []string{
		``, `null`, `{}`, `[]`, `"x"`, `{"url":null}`, `{"url":1}`, `{"url":""}`,
		`{"url":"https://example.com/hook"}`, `{"url":"http://127.0.0.1:8080/"}`,
		`{"URL":"https://example.com"}`, `{"url":"https://"}`, `{"url":"//example.com"}`,
		`{"url":"ftp://example.com"}`, `{"url":"https://user:pw@example.com/?q=1#f"}`,
		`{"url":"https://[::1]:443/"}`, `{"url":"https://exa mple.com/%zz"}`, `{"url":"https://a","url":"http://b"}`,
	} {
		f.Add([]byte(seed), false)
		f.Add([]byte(seed), true)
	}
	f.Fuzz(func(t *testing.T, raw []byte, allowPrivate bool) {
		u, err := parseWebhookConfig(raw, allowPrivate)
		if err != nil {
			pe := asError(t, err)
			if pe.Kind != ConfigInvalid || !strings.Contains(pe.Message, "config_json") {
				t.Fatalf("error %q (kind %v) is not ConfigInvalid naming config_json", pe.Message, pe.Kind)
			}
			return
		}
		if u.Hostname() == "" || (u.Scheme != "https" && (u.Scheme != "http" || !allowPrivate)) {
			t.Fatalf("accepted %q (allowPrivate=%v)", u, allowPrivate)
		}
		if _, err := http.NewRequest(http.MethodPost, u.String(), nil); err != nil {
			t.Fatalf("accepted %q, which cannot make a request: %v", u, err)
		}
	})
}

type responseSeed struct {
	status               int
	retryAfter, location string
	body                 string
}

func FuzzParseResponse(f *testing.F) {
	date := testNow.Add(time.Minute).UTC().Format(http.TimeFormat)
	seeds := []responseSeed{
		{200, "", "", `{"id":"ext-1"}`},
		{200, "", "", `{"id":12.5e3}`},
		{201, "", "", ``},
		{202, "", "", `{"id":"job"}`},
		{409, "", "", `{"id":null}`},
		{400, "", "", "bad " + testToken},
		{401, "", "", testSigning + "\x00\xff"},
		{429, "120", "", ``},
		{503, date, "", `<html>` + strings.Repeat("é", 600)},
		{302, "", "https://evil.example/path?token=" + testToken, ``},
		{301, "", "/relative", ``},
		{600, "-1", "", `{`},
	}
	for _, form := range echoForms(encodedCred().Values()...) {
		seeds = append(seeds,
			responseSeed{400, "", "", `{"error":"invalid token ` + form + `"}`},
			responseSeed{200, "", "", `{"id":"` + form + `"}`},
			responseSeed{503, "", "", strings.Repeat("x", maxQuotedBody-4) + form})
	}
	for _, s := range seeds {
		f.Add(s.status, s.retryAfter, s.location, []byte(s.body))
	}
	requestURL, _ := url.Parse("https://provider.example/hook")
	// Both credentials at once: the plain one and the one whose values
	// change under JSON, URL and base64 encoding.
	cred := credential.Credential{Token: testCred().Token, SigningSecret: encodedCred().SigningSecret}
	cred2 := credential.Credential{Token: encodedCred().Token, SigningSecret: testCred().SigningSecret}
	f.Fuzz(func(t *testing.T, status int, retryAfter, location string, body []byte) {
		fuzzResponse(t, cred, status, retryAfter, location, body, requestURL)
		fuzzResponse(t, cred2, status, retryAfter, location, body, requestURL)
	})
}

// fuzzResponse checks what interpretResponse makes of one response.
func fuzzResponse(t *testing.T, cred credential.Credential, status int, retryAfter, location string, body []byte, requestURL *url.URL) {
	t.Helper()
	header := http.Header{}
	header.Set("Retry-After", retryAfter)
	header.Set("Location", location)
	res, err := interpretResponse(status, header, body, requestURL, testNow, cred)
	if err == nil {
		switch res.Status {
		case StatusCompleted, StatusAccepted:
		default:
			t.Fatalf("status %d gave result status %q", status, res.Status)
		}
		if !answersWithID(status) {
			t.Fatalf("status %d answered %+v, want an error", status, res)
		}
		checkNoSecret(t, cred, "ExternalID", res.ExternalID)
		if len(res.ExternalID) > maxExternalIDBytes || strings.ContainsFunc(res.ExternalID, unicode.IsControl) {
			t.Fatalf("ExternalID %q is too long or holds control characters", res.ExternalID)
		}
		return
	}
	pe := asError(t, err)
	if pe.Kind != Retryable && pe.Kind != Rejected {
		t.Fatalf("status %d gave kind %v", status, pe.Kind)
	}
	if pe.StatusCode != status {
		t.Fatalf("StatusCode = %d, want %d", pe.StatusCode, status)
	}
	if pe.RetryAfter < 0 || pe.RetryAfter > maxRetryAfter || (pe.RetryAfter > 0 && pe.Kind != Retryable) {
		t.Fatalf("RetryAfter = %v (kind %v)", pe.RetryAfter, pe.Kind)
	}
	if pe.AuthFailed != (status == 401 || status == 403) {
		t.Fatalf("AuthFailed = %v for status %d", pe.AuthFailed, status)
	}
	msg := pe.Error()
	checkNoSecret(t, cred, "message", msg)
	if !utf8.ValidString(msg) || strings.ContainsAny(msg, "\x00\n\r") {
		t.Fatalf("message %q is not one line of valid UTF-8", msg)
	}
	if len(msg) > 900 {
		t.Fatalf("message is %d bytes long", len(msg))
	}
}

func FuzzParseSandboxConfig(f *testing.F) {
	for _, seed := range []string{
		``, `null`, `{}`, `[]`, `{"latencyMs":10}`, `{"latencyMs":-1}`, `{"latencyMs":1e2}`,
		`{"failureRate":0.5}`, `{"failureRate":2}`, `{"answer":"accepted"}`, `{"answer":"nope"}`,
		`{"retryAfterSeconds":60}`, `{"unknown":true}`, `{"latencyMs":null}`,
		`{"latencyMs":5,"failureRate":1,"answer":"retry","retryAfterSeconds":3600}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		cfg, err := parseSandboxConfig(json.RawMessage(raw))
		if err != nil {
			pe := asError(t, err)
			if pe.Kind != ConfigInvalid || !strings.Contains(pe.Message, "config_json") {
				t.Fatalf("error %q (kind %v) is not ConfigInvalid naming config_json", pe.Message, pe.Kind)
			}
			return
		}
		if cfg.Latency < 0 || cfg.Latency > maxSandboxLatency ||
			!(cfg.FailureRate >= 0 && cfg.FailureRate <= 1) ||
			cfg.RetryAfter < 0 || cfg.RetryAfter > maxSandboxRetryAfter {
			t.Fatalf("out-of-range config accepted: %+v", cfg)
		}
		switch cfg.Answer {
		case sandboxCompleted, sandboxAccepted, sandboxUncertain, sandboxReject, sandboxRetry:
		default:
			t.Fatalf("answer %q accepted", cfg.Answer)
		}
	})
}

// encodedCred is a credential whose values change under JSON escaping
// ('/', '<', '&', non-ASCII), URL encoding ('+', '=', '/') and base64.
func encodedCred() credential.Credential {
	return credential.Credential{
		Token:         credential.NewSecret("tok/SECRET+abc=="),
		SigningSecret: credential.NewSecret("sig-SECRET-é<&>"),
	}
}

// echoForms returns the ways a provider may echo the values back: raw, as
// encoding/json writes them, as PHP's json_encode writes them ("\/" for '/',
// \uXXXX for non-ASCII), URL-encoded (query and path) and base64.
func echoForms(values ...string) []string {
	var out []string
	for _, v := range values {
		goJSON, _ := json.Marshal(v)
		ascii := strconv.QuoteToASCII(v) // JSON for printable text without '"' or '\'
		php := strings.ReplaceAll(ascii[1:len(ascii)-1], "/", `\/`)
		out = append(out, v, string(goJSON[1:len(goJSON)-1]), php, url.QueryEscape(v), url.PathEscape(v),
			base64.StdEncoding.EncodeToString([]byte(v)))
	}
	return out
}

// checkNoSecret fails when s holds a value of cred, raw or encoded.
func checkNoSecret(t *testing.T, cred credential.Credential, what, s string) {
	t.Helper()
	for _, secret := range echoForms(cred.Values()...) {
		if strings.Contains(s, secret) {
			t.Fatalf("%s %q contains the secret form %q", what, s, secret)
		}
	}
}
