package push_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/push"
	"integration-outbox/internal/testenv"
)

// grantCredentials hands out one access token and records what the worker
// reports of the connection's grant; the resolver's side of it (the state,
// the conflict, the resumption) is tested in internal/credential.
type grantCredentials struct {
	resolves, invalidated, refused atomic.Int64
	record                         bool
}

func (g *grantCredentials) ResolveConnection(context.Context, credential.Connection) (credential.Credential, error) {
	g.resolves.Add(1)
	return credential.Credential{Token: credential.NewSecret("xero-access-token")}, nil
}

func (g *grantCredentials) Invalidate(string) { g.invalidated.Add(1) }

func (g *grantCredentials) NeedsReauthorization(context.Context, credential.Connection, string) (bool, error) {
	g.refused.Add(1)
	return g.record, nil
}

// A provider refusing the grant itself (Xero's 403 for a disconnected
// tenant), again after a fresh token: the worker reports the connection as
// needing reauthorization and the row waits for the reconnection with its
// attempt not charged; where nothing could be recorded (not an OAuth2
// grant), the row ends as the provider's refusal, as before.
func TestARefusedGrantHoldsTheRowForReauthorization(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		record           bool
		status           string
		attempts, refuse int
	}{
		{record: true, status: "failed", attempts: 0},
		{record: false, status: "dead_letter", attempts: 1},
	} {
		f := pg.NewDB(t)
		creds := &grantCredentials{record: c.record}
		w, err := push.New(outbox.NewStore(f.Pool), creds, purchaseorder.NewCommand(f.Pool), push.Config{
			Logger:      slog.New(slog.DiscardHandler),
			Providers:   provider.NewRegistry(provider.NewXero(provider.AccountingConfig{AllowPrivateNetworks: true})),
			MaxAttempts: 10, ProviderTimeout: 2 * time.Second, Jitter: func() float64 { return 0 },
		})
		if err != nil {
			t.Fatal(err)
		}
		b := bundle{f: f, store: outbox.NewStore(f.Pool), worker: w, org: f.NewID(t)}
		rc := documented(t, "403 xero/forbidden_403.json", "403 xero/forbidden_403.json")
		ids := f.PurchaseOrderCommand(t, testenv.PurchaseOrderCommandOpts{
			Connection: testenv.ConnectionOpts{OrganizationID: b.org, Provider: "xero", CredentialReference: "integrations/x",
				Config: map[string]string{"tenantId": "tenant-7", "accountCode": "300", "apiBaseUrl": rc.URL}},
			Command: testenv.CommandOpts{Payload: map[string]string{"externalSupplierId": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"}}})
		b.handle(t, b.claim(t, 10))
		r := f.Row(t, ids.CommandID)
		if r.Status != c.status || r.AttemptCount != c.attempts {
			t.Errorf("recorded %v: the row is %s at attempt %d, want %s at %d (last_error %q)",
				c.record, r.Status, r.AttemptCount, c.status, c.attempts, deref(r.LastError))
		}
		if creds.invalidated.Load() != 1 || creds.refused.Load() != 1 || len(rc.Requests()) != 2 {
			t.Errorf("recorded %v: %d invalidations, %d refusals reported, %d calls; want 1, 1, 2",
				c.record, creds.invalidated.Load(), creds.refused.Load(), len(rc.Requests()))
		}
	}
}
