package push_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/push"
	"integration-outbox/internal/supplier"
)

// The outbox core names no command type and no entity: adding a command
// never edits it. A check of its production sources, so that a future
// shortcut (a join to a command's table, a switch on a command type) fails
// here.
func TestOutboxCoreNamesNoCommandOrEntity(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "outbox", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("outbox sources: %v, %v", files, err)
	}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ToLower(string(src))
		for _, name := range []string{purchaseorder.CommandType, "purchase_order", "purchaseorder", "purchase order",
			supplier.CommandType, "supplier"} {
			if strings.Contains(text, name) {
				t.Errorf("%s names %q: the outbox core must stay command-agnostic", path, name)
			}
		}
	}
}

// brokenLoad is the purchase-order command whose load fails, as when the
// database drops the connection between start and load.
type brokenLoad struct{ push.Command }

func (brokenLoad) Load(context.Context, []outbox.Job) ([]push.Delivery, error) {
	return nil, fmt.Errorf("loading purchase orders: %w", context.DeadlineExceeded)
}

// A load that fails costs the jobs an attempt but no provider call: they are
// failed with the cause and retried after the backoff, not left to wait for
// their lease to expire.
func TestJobsWhoseEntityCannotBeLoadedAreRetriedWithoutACall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, answer(200, nil, `{"id":"EXT"}`))
	id := b.webhookCommand(t, rc.URL, "")
	resolver, err := credential.NewResolver(b.secrets, credential.ResolverConfig{Prefix: "integrations/", Region: "us-east-1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	w, err := push.New(b.store, resolver, brokenLoad{purchaseorder.NewCommand(b.f.Pool)}, push.Config{
		Providers: provider.NewRegistry(provider.NewWebhook(provider.WebhookConfig{AllowPrivateNetworks: true, Timeout: 2 * time.Second})),
		Jitter:    func() float64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := w.Handle(context.Background(), b.claim(t, 10))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle = %+v, %v", resp, err)
	}
	r := b.f.Row(t, id)
	if r.Status != "failed" || !strings.Contains(deref(r.LastError), "loading the command's entity") ||
		r.RetryInSeconds == nil || *r.RetryInSeconds < 25 {
		t.Errorf("row = %s, last_error %q, retry in %v; want failed with the load error, retried after the backoff",
			r.Status, deref(r.LastError), r.RetryInSeconds)
	}
	if n := rc.Calls(); n != 0 {
		t.Errorf("provider called %d times", n)
	}
}
