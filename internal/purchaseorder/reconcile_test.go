package purchaseorder_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/testenv"
)

// pushJob loads the job of order po (unknown: when its first attempt of
// unknown outcome started, zero for none) and sends it to p.
func pushJob(t *testing.T, f *testenv.Fixture, p provider.Provider, org, po, key string, conn provider.Connection,
	payload string, unknown time.Time) (provider.Result, error) {
	t.Helper()
	j := outbox.Job{ID: key + "-job", OrganizationID: org, ConnectionID: conn.ID, CommandType: purchaseorder.CommandType,
		LocalEntityType: "purchase_order", LocalEntityID: po, Payload: json.RawMessage(payload), IdempotencyKey: key,
		Connection: &outbox.Connection{ID: conn.ID, Provider: conn.Provider, Config: conn.Config}, UnknownSince: unknown}
	ds, err := purchaseorder.NewCommand(f.Pool).Load(context.Background(), []outbox.Job{j})
	if err != nil || ds[0].Send == nil {
		t.Fatalf("Load = %+v, %v", ds, err)
	}
	return ds[0].Send(context.Background(), p, conn, credential.Credential{Token: credential.NewSecret("access-token")})
}

// TestQuickBooksCreateRetriedAfterItsReplayIsLookedUp: on the QuickBooks
// stand-in, which forgets a requestid an hour after its first use, a
// create whose answer was lost after the purchase order was made is
// retried two hours later. Told its earlier outcome is unknown, the push
// queries the DocNumber and completes with the one purchase order
// (reconciled, remembered with its SyncToken). Trusting the replay, as
// before, it makes a second.
func TestQuickBooksCreateRetriedAfterItsReplayIsLookedUp(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	org := f.NewID(t)
	qb, err := testenv.StartQuickBooksStandIn("9130", "access-token")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(qb.Close)
	var skew atomic.Int64
	qb.ReplayWindow = time.Hour
	qb.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	vendor := qb.AddVendor("Acme Supplies")
	q := provider.NewQuickBooks(provider.AccountingConfig{AllowPrivateNetworks: true, Timeout: 5 * time.Second})
	t.Cleanup(q.CloseIdleConnections)
	conn := connection(t, f, org, provider.NameQuickBooks, map[string]any{"realmId": "9130", "expenseAccountId": "80", "apiBaseUrl": qb.URL})
	payload := `{"externalSupplierId": "` + vendor + `"}`
	orders := func(po string) []provider.Document {
		var number string
		if err := f.Pool.QueryRow(context.Background(), `select order_number from purchase_orders where id = $1`, po).Scan(&number); err != nil {
			t.Fatal(err)
		}
		var out []provider.Document
		for _, o := range qb.PurchaseOrders() {
			if o.Fields["DocNumber"] == number {
				out = append(out, provider.Document{ID: o.ID, SyncToken: o.SyncToken})
			}
		}
		return out
	}

	for _, tc := range []struct {
		name   string
		lookUp bool
		want   int
	}{{"looked up", true, 1}, {"trusting the replay", false, 2}} {
		po := f.PurchaseOrder(t, org, "", 1)
		key := "key-" + tc.name
		qb.LoseAnswers(1)
		began := time.Now()
		_, err := pushJob(t, f, q, org, po, key, conn, payload, time.Time{})
		var perr *provider.Error
		if !errors.As(err, &perr) || !perr.OutcomeUnknown || len(orders(po)) != 1 {
			t.Fatalf("%s: the lost answer = %v, %d orders; want an unknown outcome, 1 order", tc.name, err, len(orders(po)))
		}
		skew.Add(int64(2 * time.Hour))
		since := time.Time{}
		if tc.lookUp {
			since = began.Add(-2 * time.Hour) // the history, aged as the stand-in's clock moved
		}
		res, err := pushJob(t, f, q, org, po, key, conn, payload, since)
		got := orders(po)
		if err != nil || len(got) != tc.want {
			t.Fatalf("%s: retry = %+v, %v; %d orders, want %d", tc.name, res, err, len(got), tc.want)
		}
		if tc.lookUp {
			if res.Action != provider.ActionReconciled || res.ExternalID != got[0].ID {
				t.Errorf("retry = %+v, want %s reconciled", res, got[0].ID)
			}
			if id, token := document(t, f, conn.ID, po, provider.NameQuickBooks); id != got[0].ID || token != got[0].SyncToken {
				t.Errorf("remembered %s/%s, want %s/%s", id, token, got[0].ID, got[0].SyncToken)
			}
		}
	}
}
