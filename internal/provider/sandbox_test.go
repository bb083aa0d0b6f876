package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"integration-outbox/internal/credential"
)

// fakeSleep records requested sleeps and returns at once.
type fakeSleep struct {
	mu    sync.Mutex
	slept []time.Duration
}

func (f *fakeSleep) sleep(ctx context.Context, d time.Duration) error {
	f.mu.Lock()
	f.slept = append(f.slept, d)
	f.mu.Unlock()
	return ctx.Err()
}

func sandboxConn(config string) Connection {
	return Connection{ID: "conn-s", OrganizationID: "org-1", Provider: NameSandbox, Config: json.RawMessage(config)}
}

func TestSandboxAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		config     string
		wantStatus string
		wantKind   ErrorKind
		wantRetry  time.Duration
	}{
		{name: "no config", config: ``, wantStatus: StatusCompleted},
		{name: "null config", config: `null`, wantStatus: StatusCompleted},
		{name: "empty config", config: `{}`, wantStatus: StatusCompleted},
		{name: "completed", config: `{"answer":"completed"}`, wantStatus: StatusCompleted},
		{name: "accepted", config: `{"answer":"accepted"}`, wantStatus: StatusAccepted},
		{name: "uncertain", config: `{"answer":"uncertain"}`, wantStatus: StatusUncertain},
		{name: "reject", config: `{"answer":"reject"}`, wantKind: Rejected},
		{name: "retry", config: `{"answer":"retry","retryAfterSeconds":30}`, wantKind: Retryable, wantRetry: 30 * time.Second},
		{name: "always failing", config: `{"failureRate":1,"retryAfterSeconds":7}`, wantKind: Retryable, wantRetry: 7 * time.Second},
		{name: "never failing", config: `{"failureRate":0,"answer":"accepted"}`, wantStatus: StatusAccepted},
	}
	idPattern := regexp.MustCompile(`^sandbox-[0-9a-f]{12}$`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := NewSandbox(SandboxConfig{Sleep: (&fakeSleep{}).sleep})
			got, err := s.PushPurchaseOrder(context.Background(), sandboxConn(tt.config), credential.Credential{}, testCommand())
			if tt.wantKind != 0 {
				pe := asError(t, err)
				if pe.Kind != tt.wantKind || pe.RetryAfter != tt.wantRetry {
					t.Errorf("error = %+v, want kind %v, RetryAfter %v", pe, tt.wantKind, tt.wantRetry)
				}
				return
			}
			if err != nil {
				t.Fatalf("PushPurchaseOrder: %v", err)
			}
			if got.Status != tt.wantStatus || !idPattern.MatchString(got.ExternalID) {
				t.Errorf("result = %+v, want status %s and a sandbox-<12 hex> id", got, tt.wantStatus)
			}
		})
	}
}

func TestSandboxDeterministic(t *testing.T) {
	t.Parallel()
	s := NewSandbox(SandboxConfig{Sleep: (&fakeSleep{}).sleep})
	conn := sandboxConn(`{"failureRate":0.3}`)

	outcome := func(key string) string {
		cmd := testCommand()
		cmd.IdempotencyKey = key
		res, err := s.PushPurchaseOrder(context.Background(), conn, credential.Credential{}, cmd)
		if err != nil {
			return "fail"
		}
		return res.ExternalID
	}
	const keys = 1000
	failures := 0
	for i := range keys {
		key := fmt.Sprintf("key-%d", i)
		first := outcome(key)
		if again := outcome(key); again != first {
			t.Fatalf("key %s: %q then %q, want the same outcome", key, first, again)
		}
		if first == "fail" {
			failures++
		}
	}
	// A hash spreads keys evenly: 30% ± a generous margin of 1000 draws.
	if failures < 230 || failures > 370 {
		t.Errorf("%d of %d keys failed at failureRate 0.3, want about 300", failures, keys)
	}

	// The id is the key's hash, so it is stable across sandboxes too.
	other := NewSandbox(SandboxConfig{})
	res, err := other.PushPurchaseOrder(context.Background(), sandboxConn(``), credential.Credential{}, testCommand())
	if err != nil || res.ExternalID != "sandbox-d05b61bd4b70" {
		t.Errorf("ExternalID for idem-1 = %q, %v; want sandbox-d05b61bd4b70 (printf idem-1 | sha256sum)", res.ExternalID, err)
	}
}

func TestSandboxLatency(t *testing.T) {
	t.Parallel()
	t.Run("waits the configured latency", func(t *testing.T) {
		t.Parallel()
		fake := &fakeSleep{}
		s := NewSandbox(SandboxConfig{Sleep: fake.sleep})
		if _, err := s.PushPurchaseOrder(context.Background(), sandboxConn(`{"latencyMs":250}`), credential.Credential{}, testCommand()); err != nil {
			t.Fatalf("PushPurchaseOrder: %v", err)
		}
		if len(fake.slept) != 1 || fake.slept[0] != 250*time.Millisecond {
			t.Errorf("slept %v, want [250ms]", fake.slept)
		}
	})
	t.Run("real sleep honours ctx", func(t *testing.T) {
		t.Parallel()
		s := NewSandbox(SandboxConfig{})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		// 60 s of latency; only the ctx deadline can end this call early.
		_, err := s.PushPurchaseOrder(ctx, sandboxConn(`{"latencyMs":60000}`), credential.Credential{}, testCommand())
		pe := asError(t, err)
		if pe.Kind != Retryable || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error = %v (kind %v), want Retryable wrapping context.DeadlineExceeded", err, pe.Kind)
		}
	})
	t.Run("cancelled ctx", func(t *testing.T) {
		t.Parallel()
		s := NewSandbox(SandboxConfig{})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := s.PushPurchaseOrder(ctx, sandboxConn(`{"latencyMs":60000}`), credential.Credential{}, testCommand())
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error = %v, want context.Canceled", err)
		}
	})
}

func TestSandboxInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, config, wantField string
		wantKind                ErrorKind
		mutate                  func(*PurchaseOrderPush)
	}{
		{name: "not an object", config: `[]`, wantField: "config_json", wantKind: ConfigInvalid},
		{name: "latency negative", config: `{"latencyMs":-1}`, wantField: "config_json.latencyMs", wantKind: ConfigInvalid},
		{name: "latency fractional", config: `{"latencyMs":1.5}`, wantField: "config_json.latencyMs", wantKind: ConfigInvalid},
		{name: "latency too long", config: `{"latencyMs":600000}`, wantField: "config_json.latencyMs", wantKind: ConfigInvalid},
		{name: "latency a string", config: `{"latencyMs":"10"}`, wantField: "config_json.latencyMs", wantKind: ConfigInvalid},
		{name: "failure rate above 1", config: `{"failureRate":1.5}`, wantField: "config_json.failureRate", wantKind: ConfigInvalid},
		{name: "failure rate negative", config: `{"failureRate":-0.1}`, wantField: "config_json.failureRate", wantKind: ConfigInvalid},
		{name: "answer unknown", config: `{"answer":"maybe"}`, wantField: "config_json.answer", wantKind: ConfigInvalid},
		{name: "answer not a string", config: `{"answer":1}`, wantField: "config_json.answer", wantKind: ConfigInvalid},
		{name: "retry after too long", config: `{"retryAfterSeconds":86400}`, wantField: "config_json.retryAfterSeconds", wantKind: ConfigInvalid},
		{name: "unknown key", config: `{"latencyms":5}`, wantField: `config_json."latencyms": unknown key`, wantKind: ConfigInvalid},
		{name: "capability option not offered", config: `{"supportsPurchaseOrders":false}`, wantField: `config_json."supportsPurchaseOrders"`, wantKind: ConfigInvalid},
		{name: "no external supplier", config: `{}`, wantField: "payload_json.externalSupplierId", wantKind: PayloadInvalid,
			mutate: func(c *PurchaseOrderPush) { c.ExternalSupplierID = "" }},
		{name: "no idempotency key", config: `{}`, wantField: "idempotency_key", wantKind: PayloadInvalid,
			mutate: func(c *PurchaseOrderPush) { c.IdempotencyKey = "" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := &fakeSleep{}
			s := NewSandbox(SandboxConfig{Sleep: fake.sleep})
			cmd := testCommand()
			if tt.mutate != nil {
				tt.mutate(&cmd)
			}
			_, err := s.PushPurchaseOrder(context.Background(), sandboxConn(tt.config), credential.Credential{}, cmd)
			pe := asError(t, err)
			if pe.Kind != tt.wantKind || !strings.Contains(pe.Message, tt.wantField) {
				t.Errorf("error = %q (kind %v), want %v naming %s", pe.Message, pe.Kind, tt.wantKind, tt.wantField)
			}
			if len(fake.slept) != 0 {
				t.Errorf("slept %v before rejecting, want no latency", fake.slept)
			}
		})
	}
}
