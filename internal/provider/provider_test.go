package provider

import (
	"errors"
	"strings"
	"testing"

	"integration-outbox/internal/testenv"
)

func TestMain(m *testing.M) {
	testenv.Main(m)
}

func TestNewRegistry(t *testing.T) {
	t.Parallel()
	w := NewWebhook(WebhookConfig{})
	s := NewSandbox(SandboxConfig{})
	r := NewRegistry(w, s)

	for name, want := range map[string]Provider{NameWebhook: w, NameSandbox: s} {
		got, err := r.Get(name)
		if err != nil || got != want {
			t.Errorf("Get(%q) = %v, %v; want %v", name, got, err, want)
		}
		if _, ok := got.(PurchaseOrderPusher); !ok {
			t.Errorf("%s does not implement PurchaseOrderPusher", name)
		}
	}
	if _, err := r.Get("nope"); !errors.Is(err, ErrUnknownProvider) {
		t.Errorf("Get(nope) error = %v, want ErrUnknownProvider", err)
	}
	if r := NewRegistry(s); len(r) != 1 {
		t.Errorf("NewRegistry(s) has %d entries, want 1", len(r))
	}
	// Without the sandbox (SANDBOX_PROVIDER_ENABLED off) its name says so.
	_, err := NewRegistry(w).Get(NameSandbox)
	if !errors.Is(err, ErrProviderOff) || !strings.Contains(err.Error(), "SANDBOX_PROVIDER_ENABLED") {
		t.Errorf("Get(sandbox) without it = %v, want ErrProviderOff naming SANDBOX_PROVIDER_ENABLED", err)
	}
}

// asError returns err as an *Error, failing the test if it is not one.
func asError(t *testing.T, err error) *Error {
	t.Helper()
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *provider.Error", err, err)
	}
	return pe
}
