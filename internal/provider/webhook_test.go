package provider

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"integration-outbox/internal/credential"
)

var testNow = time.Unix(1_700_000_000, 0)

const (
	testToken   = "tok-SECRET-abc123"
	testSigning = "sig-SECRET-xyz789"
)

func testCred() credential.Credential {
	return credential.Credential{
		Token:         credential.NewSecret(testToken),
		SigningSecret: credential.NewSecret(testSigning),
	}
}

func testCommand() PurchaseOrderPush {
	return PurchaseOrderPush{
		CommandType:        "push_purchase_order",
		IdempotencyKey:     "idem-1",
		ExternalSupplierID: "sup-9",
		PurchaseOrder:      json.RawMessage(`{"id":"po-1","organizationId":"org-1","locationId":null,"items":[{"id":"l-1","stockItemId":"s-1","quantity":2}]}`),
	}
}

// captured is what a test server saw.
type captured struct {
	mu       sync.Mutex
	hits     int
	conns    int
	body     []byte
	header   http.Header
	method   string
	path     string
	lastHost string
}

func (c *captured) snapshot() (hits, conns int, body []byte, header http.Header) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.conns, c.body, c.header
}

// testServer starts an httptest server on 127.0.0.1 (TLS when tls is set)
// that records each request and connection and then runs handler.
func testServer(t *testing.T, tls bool, handler http.HandlerFunc) (*httptest.Server, *captured) {
	t.Helper()
	c := &captured{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.hits++
		c.body, c.header, c.method, c.path, c.lastHost = body, r.Header.Clone(), r.Method, r.URL.RequestURI(), r.Host
		c.mu.Unlock()
		if handler != nil {
			handler(w, r)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			c.mu.Lock()
			c.conns++
			c.mu.Unlock()
		}
	}
	if tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv, c
}

// newTestWebhook returns a webhook in local mode with a fixed clock.
func newTestWebhook(t *testing.T, cfg WebhookConfig) *Webhook {
	t.Helper()
	if cfg.Clock == nil {
		cfg.Clock = func() time.Time { return testNow }
	}
	w := NewWebhook(cfg)
	t.Cleanup(w.CloseIdleConnections)
	return w
}

func conn(rawURL string) Connection {
	cfg, _ := json.Marshal(map[string]string{"url": rawURL})
	return Connection{ID: "conn-1", OrganizationID: "org-1", Provider: NameWebhook, Config: cfg}
}

func TestWebhookRequest(t *testing.T) {
	t.Parallel()
	wantBody := `{"commandType":"push_purchase_order","idempotencyKey":"idem-1","externalSupplierId":"sup-9",` +
		`"purchaseOrder":{"id":"po-1","organizationId":"org-1","locationId":null,"items":[{"id":"l-1","stockItemId":"s-1","quantity":2}]}}`

	tests := []struct {
		name string
		cred credential.Credential
	}{
		{"token and signing secret", testCred()},
		{"no credential values", credential.Credential{}},
		{"token only", credential.Credential{Token: credential.NewSecret(testToken)}},
		{"signing secret only", credential.Credential{SigningSecret: credential.NewSecret(testSigning)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, seen := testServer(t, false, func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusOK)
			})
			w := newTestWebhook(t, WebhookConfig{AllowPrivateNetworks: true})

			if _, err := w.PushPurchaseOrder(context.Background(), conn(srv.URL+"/hooks/po?x=1"), tt.cred, testCommand()); err != nil {
				t.Fatalf("PushPurchaseOrder: %v", err)
			}
			hits, _, body, header := seen.snapshot()
			if hits != 1 {
				t.Fatalf("server hits = %d, want 1", hits)
			}
			if seen.method != http.MethodPost || seen.path != "/hooks/po?x=1" {
				t.Errorf("request = %s %s, want POST /hooks/po?x=1", seen.method, seen.path)
			}
			if string(body) != wantBody {
				t.Errorf("body =\n%s\nwant\n%s", body, wantBody)
			}
			for key, want := range map[string]string{
				"Content-Type":    "application/json",
				"Idempotency-Key": "idem-1",
			} {
				if got := header.Get(key); got != want {
					t.Errorf("header %s = %q, want %q", key, got, want)
				}
			}

			wantAuth := ""
			if !tt.cred.Token.IsZero() {
				wantAuth = "Bearer " + testToken
			}
			if got := header.Get("Authorization"); got != wantAuth {
				t.Errorf("Authorization = %q, want %q", got, wantAuth)
			}

			sig := header.Get("X-Outbox-Signature")
			if tt.cred.SigningSecret.IsZero() {
				if sig != "" {
					t.Errorf("X-Outbox-Signature = %q, want none", sig)
				}
				return
			}
			ts, v1, ok := strings.Cut(sig, ",v1=")
			if !ok || ts != "t=1700000000" {
				t.Fatalf("X-Outbox-Signature = %q, want t=1700000000,v1=<hex>", sig)
			}
			mac := hmac.New(sha256.New, []byte(testSigning))
			mac.Write([]byte("1700000000."))
			mac.Write(body)
			if want := hex.EncodeToString(mac.Sum(nil)); v1 != want {
				t.Errorf("signature v1 = %s, want %s", v1, want)
			}
		})
	}
}

func TestWebhookResponses(t *testing.T) {
	t.Parallel()
	retryDate := testNow.Add(90 * time.Second).UTC().Format(http.TimeFormat)

	tests := []struct {
		name       string
		status     int
		header     map[string]string
		body       string
		want       Result
		wantKind   ErrorKind
		wantRetry  time.Duration
		wantAuth   bool
		wantInText string
	}{
		{name: "200 with string id", status: 200, body: `{"id":"ext-1","ok":true}`, want: Result{Status: StatusCompleted, ExternalID: "ext-1"}},
		{name: "200 with number id", status: 200, body: `{"id":12345}`, want: Result{Status: StatusCompleted, ExternalID: "12345"}},
		{name: "200 with ID in other case", status: 200, body: `{"ID":"nope"}`, want: Result{Status: StatusCompleted}},
		{name: "200 not JSON", status: 200, body: `ok`, want: Result{Status: StatusCompleted}},
		{name: "201 with id", status: 201, body: `{"id":"ext-2"}`, want: Result{Status: StatusCompleted, ExternalID: "ext-2"}},
		{name: "201 empty", status: 201, want: Result{Status: StatusCompleted}},
		{name: "202 with id", status: 202, body: `{"id":"job-7"}`, want: Result{Status: StatusAccepted, ExternalID: "job-7"}},
		{name: "202 empty", status: 202, want: Result{Status: StatusAccepted}},
		{name: "409 with id", status: 409, body: `{"id":"ext-3","error":"duplicate"}`, want: Result{Status: StatusCompleted, ExternalID: "ext-3"}},
		{name: "409 without id", status: 409, body: `duplicate`, want: Result{Status: StatusCompleted}},
		{name: "400", status: 400, body: `{"error":"bad request"}`, wantKind: Rejected, wantInText: "bad request"},
		{name: "404", status: 404, wantKind: Rejected},
		{name: "422", status: 422, body: "unknown supplier\nline two", wantKind: Rejected, wantInText: "unknown supplier line two"},
		{name: "401", status: 401, wantKind: Rejected, wantAuth: true},
		{name: "403", status: 403, wantKind: Rejected, wantAuth: true},
		{name: "408", status: 408, wantKind: Retryable},
		{name: "429 Retry-After seconds", status: 429, header: map[string]string{"Retry-After": "120"}, wantKind: Retryable, wantRetry: 120 * time.Second},
		{name: "429 Retry-After HTTP-date", status: 429, header: map[string]string{"Retry-After": retryDate}, wantKind: Retryable, wantRetry: 90 * time.Second},
		{name: "429 Retry-After capped", status: 429, header: map[string]string{"Retry-After": "999999"}, wantKind: Retryable, wantRetry: time.Hour},
		{name: "429 Retry-After garbage", status: 429, header: map[string]string{"Retry-After": "soon"}, wantKind: Retryable},
		{name: "500", status: 500, body: "boom", wantKind: Retryable, wantInText: "boom"},
		{name: "503 Retry-After", status: 503, header: map[string]string{"Retry-After": "5"}, wantKind: Retryable, wantRetry: 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := testServer(t, false, func(w http.ResponseWriter, _ *http.Request) {
				for k, v := range tt.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			w := newTestWebhook(t, WebhookConfig{AllowPrivateNetworks: true})

			got, err := w.PushPurchaseOrder(context.Background(), conn(srv.URL), testCred(), testCommand())
			if tt.wantKind == 0 {
				if err != nil {
					t.Fatalf("PushPurchaseOrder: %v", err)
				}
				want := tt.want
				want.StatusCode = tt.status // kept in the attempt history
				if got != want {
					t.Errorf("result = %+v, want %+v", got, want)
				}
				return
			}
			pe := asError(t, err)
			if pe.Kind != tt.wantKind || pe.StatusCode != tt.status || pe.RetryAfter != tt.wantRetry || pe.AuthFailed != tt.wantAuth {
				t.Errorf("error = {Kind:%v StatusCode:%d RetryAfter:%v AuthFailed:%v}, want {%v %d %v %v}",
					pe.Kind, pe.StatusCode, pe.RetryAfter, pe.AuthFailed, tt.wantKind, tt.status, tt.wantRetry, tt.wantAuth)
			}
			if !strings.Contains(pe.Error(), tt.wantInText) {
				t.Errorf("error text %q does not contain %q", pe.Error(), tt.wantInText)
			}
		})
	}
}

func TestWebhookTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		timeout time.Duration // WebhookConfig.Timeout
		ctxCut  time.Duration // caller's ctx deadline, 0 for none
	}{
		{name: "caller deadline earlier than Timeout", timeout: time.Minute, ctxCut: 100 * time.Millisecond},
		{name: "Timeout earlier than caller deadline", timeout: 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			srv, _ := testServer(t, false, func(w http.ResponseWriter, r *http.Request) {
				select { // hang until the client gives up
				case <-r.Context().Done():
				case <-release:
				}
			})
			t.Cleanup(func() { close(release) }) // runs before srv.Close
			w := newTestWebhook(t, WebhookConfig{AllowPrivateNetworks: true, Timeout: tt.timeout})

			ctx := context.Background()
			if tt.ctxCut > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.ctxCut)
				defer cancel()
			}
			_, err := w.PushPurchaseOrder(ctx, conn(srv.URL), testCred(), testCommand())
			pe := asError(t, err)
			if pe.Kind != Retryable || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error = %v (kind %v), want Retryable wrapping context.DeadlineExceeded", err, pe.Kind)
			}
		})
	}
}

func TestWebhookConnectionRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	w := newTestWebhook(t, WebhookConfig{AllowPrivateNetworks: true})
	// The token in the URL must still not reach the error text.
	_, err = w.PushPurchaseOrder(context.Background(), conn("http://"+addr+"/hook?key="+testToken), testCred(), testCommand())
	pe := asError(t, err)
	if pe.Kind != Retryable || pe.StatusCode != 0 {
		t.Errorf("error = %v (kind %v, status %d), want Retryable without status", err, pe.Kind, pe.StatusCode)
	}
	if text := err.Error(); strings.Contains(text, testToken) || !strings.Contains(text, "http://"+addr) {
		t.Errorf("error text %q leaks the token or does not name the target's host", text)
	}
}

// TestWebhookTransportErrorNamesSchemeAndHostOnly: a transport error names
// the target as scheme://host, never the URL's path or query, which carry
// hook tokens and API keys that are not the connection's secret.
func TestWebhookTransportErrorNamesSchemeAndHostOnly(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	slow, _ := testServer(t, false, func(http.ResponseWriter, *http.Request) { time.Sleep(500 * time.Millisecond) })
	const pathToken, queryKey = "hookTOKEN4711", "APIKEY0815"
	for _, tc := range []struct {
		name, base string
		timeout    time.Duration
		wantCause  error
	}{
		{"connection refused", "http://" + addr, 0, nil},
		{"timeout", slow.URL, 50 * time.Millisecond, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newTestWebhook(t, WebhookConfig{AllowPrivateNetworks: true, Timeout: tc.timeout})
			target := tc.base + "/hooks/" + pathToken + "?api_key=" + queryKey + "#frag"
			_, err := w.PushPurchaseOrder(context.Background(), conn(target), testCred(), testCommand())
			pe := asError(t, err)
			if pe.Kind != Retryable {
				t.Fatalf("error = %v (kind %v), want Retryable", err, pe.Kind)
			}
			if tc.wantCause != nil && !errors.Is(err, tc.wantCause) {
				t.Errorf("error %v no longer unwraps to %v", err, tc.wantCause)
			}
			text := err.Error()
			for _, leak := range []string{pathToken, queryKey, "/hooks", "api_key", "frag"} {
				if strings.Contains(text, leak) {
					t.Errorf("error text %q quotes %q of the URL", text, leak)
				}
			}
			if !strings.Contains(text, tc.base) {
				t.Errorf("error text %q does not name %s", text, tc.base)
			}
		})
	}
}

// TestWebhookMasksEncodedSecrets: a provider that echoes the credential
// JSON-escaped (as PHP writes it, "\/" for '/'), URL-encoded or base64'd
// gets it masked like a raw echo.
func TestWebhookMasksEncodedSecrets(t *testing.T) {
	t.Parallel()
	cred := encodedCred()
	forms := echoForms(cred.Values()...)
	srv, _ := testServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":"bad credentials","got":"`+strings.Join(forms, " ")+`"}`)
	})
	w := newTestWebhook(t, WebhookConfig{AllowPrivateNetworks: true})

	_, err := w.PushPurchaseOrder(context.Background(), conn(srv.URL), cred, testCommand())
	text := asError(t, err).Error()
	for _, f := range forms {
		if strings.Contains(text, f) {
			t.Errorf("error text %q holds the secret form %q", text, f)
		}
	}
	if n := strings.Count(text, "[redacted]"); n != len(forms) {
		t.Errorf("error text %q masks %d forms, want %d", text, n, len(forms))
	}
}

func TestWebhookMasksSecrets(t *testing.T) {
	t.Parallel()
	srv, _ := testServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		// Echo what the provider got, and the signing secret for good measure.
		io.WriteString(w, "invalid "+r.Header.Get("Authorization")+" (expected signature key "+testSigning+")")
	})
	w := newTestWebhook(t, WebhookConfig{AllowPrivateNetworks: true})

	_, err := w.PushPurchaseOrder(context.Background(), conn(srv.URL), testCred(), testCommand())
	pe := asError(t, err)
	if !pe.AuthFailed || pe.Kind != Rejected {
		t.Errorf("error = %+v, want Rejected with AuthFailed", pe)
	}
	text := err.Error()
	for _, secret := range []string{testToken, testSigning} {
		if strings.Contains(text, secret) {
			t.Errorf("error text %q contains a secret", text)
		}
	}
	if want := "invalid Bearer [redacted] (expected signature key [redacted])"; !strings.Contains(text, want) {
		t.Errorf("error text %q does not contain %q", text, want)
	}
}

func TestWebhookBodyCap(t *testing.T) {
	// Not parallel: it measures allocations, which parallel tests would skew.
	const fiveMiB = 5 << 20
	tests := []struct {
		name     string
		status   int
		prefix   string
		want     Result
		wantKind ErrorKind
		maxAlloc uint64
	}{
		// An error is read only as far as its message quotes it.
		{name: "500", status: 500, wantKind: Retryable, maxAlloc: 1 << 20},
		// A success is read up to the 1 MiB cap, so the id of a longer body
		// is lost. io.ReadAll costs about twice what it returns (more under
		// -race): ~2-5 MiB for the cap, 10 MiB or more for the whole body.
		{name: "200", status: 200, prefix: `{"id":"lost","pad":"`, want: Result{Status: StatusCompleted}, maxAlloc: 8 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chunk := bytes.Repeat([]byte("x"), 64<<10)
			srv, _ := testServer(t, false, func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.prefix)
				for written := 0; written < fiveMiB; written += len(chunk) {
					if _, err := w.Write(chunk); err != nil {
						return // the client stopped reading
					}
				}
				io.WriteString(w, `"}`)
			})
			w := newTestWebhook(t, WebhookConfig{AllowPrivateNetworks: true})

			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			got, err := w.PushPurchaseOrder(context.Background(), conn(srv.URL), testCred(), testCommand())
			runtime.ReadMemStats(&after)

			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("allocated %d bytes", alloc)
			if alloc > tt.maxAlloc {
				t.Errorf("one call allocated %d bytes for a 5 MiB response, want at most %d", alloc, tt.maxAlloc)
			}
			if tt.wantKind == 0 {
				want := tt.want
				want.StatusCode = tt.status
				if err != nil || got != want {
					t.Errorf("PushPurchaseOrder = %+v, %v; want %+v", got, err, want)
				}
				return
			}
			pe := asError(t, err)
			if pe.Kind != tt.wantKind || pe.StatusCode != tt.status {
				t.Errorf("error = %+v, want kind %v, status %d", pe, tt.wantKind, tt.status)
			}
			if n := len(pe.Message); n > maxQuotedBody+100 {
				t.Errorf("message is %d bytes, want at most ~%d quoted", n, maxQuotedBody)
			}
		})
	}
}

func TestWebhookBodyTruncated(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		body   string
		wantID string
	}{
		{"fits", `{"id":"short"}`, "short"},
		{"over the cap", `{"id":"long","pad":"` + strings.Repeat("p", 100) + `"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := testServer(t, false, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, tt.body) })
			w := newTestWebhook(t, WebhookConfig{AllowPrivateNetworks: true, MaxBodyBytes: 64})
			got, err := w.PushPurchaseOrder(context.Background(), conn(srv.URL), testCred(), testCommand())
			if err != nil {
				t.Fatalf("PushPurchaseOrder: %v", err)
			}
			if want := (Result{Status: StatusCompleted, ExternalID: tt.wantID, StatusCode: 200}); got != want {
				t.Errorf("result = %+v, want %+v", got, want)
			}
		})
	}
}

func TestWebhookRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	target, targetSeen := testServer(t, false, nil)
	srv, _ := testServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/private/path?token=abc", http.StatusFound)
	})
	w := newTestWebhook(t, WebhookConfig{AllowPrivateNetworks: true})

	_, err := w.PushPurchaseOrder(context.Background(), conn(srv.URL), testCred(), testCommand())
	pe := asError(t, err)
	if pe.Kind != Rejected || pe.StatusCode != http.StatusFound {
		t.Errorf("error = %+v, want Rejected 302", pe)
	}
	if hits, conns, _, _ := targetSeen.snapshot(); hits != 0 || conns != 0 {
		t.Errorf("redirect target got %d requests on %d connections, want none", hits, conns)
	}
	targetHost := strings.TrimPrefix(target.URL, "http://")
	if text := pe.Error(); !strings.Contains(text, "redirect not followed") || !strings.Contains(text, targetHost) ||
		strings.Contains(text, "private") || strings.Contains(text, "token") {
		t.Errorf("error text %q: want the redirect and Location host %s, without path or query", text, targetHost)
	}
}

func TestWebhookReusesConnections(t *testing.T) {
	t.Parallel()
	srv, seen := testServer(t, false, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"id":"x"}`) })
	w := newTestWebhook(t, WebhookConfig{AllowPrivateNetworks: true})
	for range 3 {
		if _, err := w.PushPurchaseOrder(context.Background(), conn(srv.URL), testCred(), testCommand()); err != nil {
			t.Fatalf("PushPurchaseOrder: %v", err)
		}
	}
	if hits, conns, _, _ := seen.snapshot(); hits != 3 || conns != 1 {
		t.Errorf("server saw %d requests on %d connections, want 3 on 1 (keep-alive)", hits, conns)
	}
}

func TestWebhookIgnoresProxyEnvironment(t *testing.T) {
	t.Parallel()
	w := NewWebhook(WebhookConfig{})
	tr, ok := w.client.Transport.(*http.Transport)
	if !ok || tr.Proxy != nil {
		t.Errorf("transport %T has a Proxy func; want none (HTTPS_PROXY would bypass the network guard)", w.client.Transport)
	}
}

func TestWebhookPublicOnly(t *testing.T) {
	t.Parallel()
	srv, seen := testServer(t, true, nil)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	portStr := strconv.Itoa(port)

	tests := []struct {
		name    string
		url     string
		wantMsg string
	}{
		{"http URL", "http://example.com/hook", "must use https"},
		{"loopback IPv4", "https://127.0.0.1:" + portStr + "/hook", "non-public address (127.0.0.1)"},
		{"loopback IPv6", "https://[::1]:" + portStr + "/hook", "non-public address (::1)"},
		{"IPv4-mapped loopback", "https://[::ffff:127.0.0.1]:" + portStr + "/hook", "non-public address"},
		{"hostname resolving to loopback", "https://localhost:" + portStr + "/hook", "non-public address"},
		{"private", "https://10.0.0.1/hook", "non-public address (10.0.0.1)"},
		{"cloud metadata", "https://169.254.169.254/latest/meta-data", "non-public address (169.254.169.254)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newTestWebhook(t, WebhookConfig{})
			// A connect that got through would hang or fail as Retryable; the
			// deadline bounds the test should the guard ever break.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()

			_, err := w.PushPurchaseOrder(ctx, conn(tt.url), testCred(), testCommand())
			pe := asError(t, err)
			if pe.Kind != ConfigInvalid {
				t.Fatalf("error = %v (kind %v), want ConfigInvalid", err, pe.Kind)
			}
			if !strings.Contains(pe.Message, "config_json.url") || !strings.Contains(pe.Message, tt.wantMsg) {
				t.Errorf("message %q, want config_json.url and %q", pe.Message, tt.wantMsg)
			}
		})
	}
	t.Cleanup(func() {
		// Registered after srv.Close, so it runs before it, once the
		// subtests are done.
		if hits, conns, _, _ := seen.snapshot(); hits != 0 || conns != 0 {
			t.Errorf("listener got %d connections and %d requests, want none", conns, hits)
		}
	})
}

func TestWebhookConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		config       string
		allowPrivate bool
		wantErr      string // "" for a valid config
	}{
		{"empty", ``, false, "config_json.url"},
		{"not an object", `[1]`, false, "config_json.url"},
		{"null", `null`, false, "config_json.url: missing"},
		{"no url", `{}`, false, "config_json.url: missing"},
		{"key case differs", `{"URL":"https://example.com"}`, false, "config_json.url: missing"},
		{"url not a string", `{"url":42}`, false, "config_json.url: not a string"},
		{"url empty", `{"url":""}`, false, "config_json.url: empty"},
		{"url relative", `{"url":"/hooks"}`, false, "config_json.url: not an absolute URL"},
		{"url without host", `{"url":"https://"}`, false, "config_json.url: not an absolute URL"},
		{"url unparsable", `{"url":"https://exa mple.com/%zz"}`, false, "config_json.url: not a valid URL"},
		{"port out of range", `{"url":"https://example.com:99999/"}`, false, "config_json.url: port"},
		{"port zero", `{"url":"https://example.com:0/"}`, false, "config_json.url: port"},
		{"ftp scheme", `{"url":"ftp://example.com/"}`, true, "config_json.url: scheme"},
		{"http in production", `{"url":"http://example.com/"}`, false, "config_json.url: must use https"},
		{"http in local mode", `{"url":"http://127.0.0.1:1/"}`, true, ""},
		{"https with other keys", `{"url":"https://example.com/hook","retries":3}`, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u, err := parseWebhookConfig(json.RawMessage(tt.config), tt.allowPrivate)
			if tt.wantErr == "" {
				if err != nil || u == nil {
					t.Fatalf("parseWebhookConfig = %v, %v; want a URL", u, err)
				}
				return
			}
			pe := asError(t, err)
			if pe.Kind != ConfigInvalid || !strings.Contains(pe.Message, tt.wantErr) {
				t.Errorf("error = %q (kind %v), want ConfigInvalid containing %q", pe.Message, pe.Kind, tt.wantErr)
			}
		})
	}
}

func TestWebhookPayloadErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		mutate  func(*PurchaseOrderPush)
		wantErr string
	}{
		{"no external supplier", func(c *PurchaseOrderPush) { c.ExternalSupplierID = "" }, "payload_json.externalSupplierId"},
		{"no idempotency key", func(c *PurchaseOrderPush) { c.IdempotencyKey = "" }, "idempotency_key"},
		{"no purchase order", func(c *PurchaseOrderPush) { c.PurchaseOrder = nil }, "purchaseOrder"},
		{"purchase order not JSON", func(c *PurchaseOrderPush) { c.PurchaseOrder = json.RawMessage(`{"id":`) }, "purchaseOrder"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, seen := testServer(t, false, nil)
			w := newTestWebhook(t, WebhookConfig{AllowPrivateNetworks: true})
			cmd := testCommand()
			tt.mutate(&cmd)

			_, err := w.PushPurchaseOrder(context.Background(), conn(srv.URL), testCred(), cmd)
			pe := asError(t, err)
			if pe.Kind != PayloadInvalid || !strings.Contains(pe.Message, tt.wantErr) {
				t.Errorf("error = %q (kind %v), want PayloadInvalid naming %s", pe.Message, pe.Kind, tt.wantErr)
			}
			if hits, _, _, _ := seen.snapshot(); hits != 0 {
				t.Errorf("server got %d requests, want none", hits)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{" 30 ", 30 * time.Second},
		{"3600", time.Hour},
		{"3601", time.Hour},
		{"18446744073709551615", time.Hour},
		{"-5", 0},
		{"1.5", 0},
		{testNow.Add(10 * time.Minute).UTC().Format(http.TimeFormat), 10 * time.Minute},
		{testNow.Add(48 * time.Hour).UTC().Format(http.TimeFormat), time.Hour},
		{testNow.Add(-time.Minute).UTC().Format(http.TimeFormat), 0},
		{testNow.Add(2 * time.Minute).UTC().Format(time.RFC850), 2 * time.Minute},
		{"tomorrow", 0},
	}
	for _, tt := range tests {
		if got := parseRetryAfter(tt.in, testNow); got != tt.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestResponseID(t *testing.T) {
	t.Parallel()
	tests := []struct{ body, want string }{
		{`{"id":"a-1"}`, "a-1"},
		{`{"id":42}`, "42"},
		{`{"id":-1.5e3}`, "-1.5e3"},
		{`{"id":null}`, ""},
		{`{"id":true}`, ""},
		{`{"id":{"x":1}}`, ""},
		{`{"Id":"x"}`, ""},
		{`["id"]`, ""},
		{`"id"`, ""},
		{``, ""},
		{`{"id":"a"`, ""},
		{`{"id":"\u00e9t\u00e9"}`, "été"},
		{`{"id":"a\u0000b"}`, ""},
		{`{"id":"` + strings.Repeat("x", maxExternalIDBytes+1) + `"}`, ""},
		{`{"id":"` + strings.Repeat("x", maxExternalIDBytes) + `"}`, strings.Repeat("x", maxExternalIDBytes)},
	}
	for _, tt := range tests {
		if got := responseID([]byte(tt.body)); got != tt.want {
			t.Errorf("responseID(%s) = %q, want %q", tt.body, got, tt.want)
		}
	}
}

func TestQuoteBody(t *testing.T) {
	t.Parallel()
	cred := testCred()
	long := strings.Repeat("é", 400) // 800 bytes, cut on a rune boundary
	tests := []struct {
		name, body string
		check      func(string) bool
	}{
		{"short", "hello", func(s string) bool { return s == "hello" }},
		{"control characters", "a\x00b\nc\r\td", func(s string) bool { return s == "a b c  d" }},
		{"invalid UTF-8", "a\xffb", func(s string) bool { return s == "a\uFFFDb" }},
		{"long", long, func(s string) bool { return len(s) <= maxQuotedBody+len("…") && strings.HasSuffix(s, "é…") }},
		{"secret across the quote's end", strings.Repeat("a", maxQuotedBody-3) + testToken, func(s string) bool {
			return !strings.Contains(s, testToken[:3]) && strings.HasSuffix(s, "aaa[re…")
		}},
		{"secret cut by the read limit", strings.Repeat("a", maxQuotedBody+10) + testToken, func(s string) bool {
			return !strings.Contains(s, testToken[:3]) && strings.HasSuffix(s, "aaa…")
		}},
		{"secret cut after masking shifted text", testSigning + testSigning + strings.Repeat("a", 476) + testToken,
			func(s string) bool {
				return !strings.Contains(s, testToken[:3]) && !strings.Contains(s, testSigning[:3]) &&
					strings.HasPrefix(s, "[redacted]")
			}},
	}
	for _, tt := range tests {
		got := quoteBody([]byte(tt.body), cred)
		if !tt.check(got) {
			t.Errorf("%s: quoteBody = %q", tt.name, got)
		}
	}
}

func TestOutboxSignatureMatchesAReferenceHMAC(t *testing.T) {
	t.Parallel()
	// Reference computed outside Go:
	// printf '1700000000.{}' | openssl dgst -sha256 -hmac key
	const want = "t=1700000000,v1=9d713ed406bb7076d4123f0dc2c39d2df5c654ed4b0cd56b52c8b4c940bd63ae"
	if got := OutboxSignature([]string{"key"}, testNow, []byte("{}")); got != want {
		t.Errorf("OutboxSignature = %s, want %s", got, want)
	}
}
