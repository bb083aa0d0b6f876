package purchaseorder_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/push"
	"integration-outbox/internal/testenv"
)

var pg *testenv.Postgres

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.WithPostgres(&pg))
}

// capture is a provider that can push purchase orders and keeps what it got.
type capture struct{ got []provider.PurchaseOrderPush }

func (*capture) Name() string { return "capture" }

func (c *capture) PushPurchaseOrder(_ context.Context, _ provider.Connection, _ credential.Credential,
	cmd provider.PurchaseOrderPush) (provider.Result, error) {
	c.got = append(c.got, cmd)
	return provider.Result{Status: provider.StatusCompleted}, nil
}

// job is a started job as outbox.Store.Start returns it.
func job(org, orderID, location string, payload string) outbox.Job {
	return outbox.Job{ID: orderID + "-job", OrganizationID: org, CommandType: purchaseorder.CommandType,
		LocalEntityID: orderID, Payload: json.RawMessage(payload), IdempotencyKey: "key-" + orderID,
		Connection: &outbox.Connection{LocationID: location}}
}

// send runs a delivery against a capturing provider and returns what it got.
func send(t *testing.T, d push.Delivery) provider.PurchaseOrderPush {
	t.Helper()
	if d.Refusal != nil || d.Send == nil {
		t.Fatalf("delivery refused: %+v", d.Refusal)
	}
	c := &capture{}
	if _, err := d.Send(context.Background(), c, provider.Connection{}, credential.Credential{}); err != nil {
		t.Fatal(err)
	}
	return c.got[0]
}

func TestLoadBuildsTheWebhookDocumentOfEachOrder(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	org := f.NewID(t)
	one, two := f.PurchaseOrder(t, org, "", 2), f.PurchaseOrder(t, org, "", 1)
	ds, err := purchaseorder.NewCommand(f.Pool).Load(context.Background(), []outbox.Job{
		job(org, one, "", `{"externalSupplierId": "SUP-1"}`), job(org, two, "", `{"externalSupplierId": "SUP-2"}`)})
	if err != nil || len(ds) != 2 {
		t.Fatalf("Load = %d deliveries, %v", len(ds), err)
	}
	for i, want := range []struct {
		id, supplier string
		lines        int
	}{{one, "SUP-1", 2}, {two, "SUP-2", 1}} {
		cmd := send(t, ds[i])
		if cmd.CommandType != purchaseorder.CommandType || cmd.ExternalSupplierID != want.supplier || cmd.IdempotencyKey != "key-"+want.id {
			t.Errorf("delivery %d = %+v", i, cmd)
		}
		var po struct {
			ID             string           `json:"id"`
			OrganizationID string           `json:"organizationId"`
			OrderNumber    string           `json:"orderNumber"`
			Items          []map[string]any `json:"items"`
		}
		if err := json.Unmarshal(cmd.PurchaseOrder, &po); err != nil {
			t.Fatal(err)
		}
		if po.ID != want.id || po.OrganizationID != org || po.OrderNumber == "" || len(po.Items) != want.lines {
			t.Errorf("purchase order = %s", cmd.PurchaseOrder)
		}
		for _, k := range []string{"id", "stockItemId", "quantity", "unitCode", "normalizedUnitCode", "unitsPerPurchaseUnit", "unitPriceMinor"} {
			if _, ok := po.Items[0][k]; !ok {
				t.Errorf("line lacks %s: %v", k, po.Items[0])
			}
		}
	}
}

func TestLoadNeverLoadsAnotherTenantsOrLocationsOrder(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	org, otherOrg := f.NewID(t), f.NewID(t)
	locA, locB := f.NewID(t), f.NewID(t)
	payload := `{"externalSupplierId": "SUP-1"}`
	cases := []struct {
		name string
		job  outbox.Job
		ok   bool
	}{
		{"other org's order", job(org, f.PurchaseOrder(t, otherOrg, "", 1), "", payload), false},
		{"other location's order", job(org, f.PurchaseOrder(t, org, locB, 1), locA, payload), false},
		{"same location's order", job(org, f.PurchaseOrder(t, org, locA, 1), locA, payload), true},
		{"any location, connection not location scoped", job(org, f.PurchaseOrder(t, org, locB, 1), "", payload), true},
		{"no order at all", job(org, f.NewID(t), "", payload), false},
	}
	jobs := make([]outbox.Job, len(cases))
	for i, c := range cases {
		jobs[i] = c.job
	}
	ds, err := purchaseorder.NewCommand(f.Pool).Load(context.Background(), jobs)
	if err != nil || len(ds) != len(cases) {
		t.Fatalf("Load = %d deliveries, %v", len(ds), err)
	}
	for i, c := range cases {
		r := ds[i].Refusal
		switch {
		case c.ok && r != nil:
			t.Errorf("%s: refused: %+v", c.name, r)
		case !c.ok && (r == nil || r.Conflict != outbox.ConflictEntityNotFound || !strings.Contains(r.Reason, c.job.LocalEntityID)):
			t.Errorf("%s: refusal = %+v, want entity_not_found naming the order", c.name, r)
		}
	}
}

func TestLoadRefusesAPayloadWithoutASupplier(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	org := f.NewID(t)
	po := f.PurchaseOrder(t, org, "", 1)
	ds, err := purchaseorder.NewCommand(f.Pool).Load(context.Background(), []outbox.Job{job(org, po, "", `{"supplier": "SUP-1"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if r := ds[0].Refusal; r == nil || r.Conflict != outbox.ConflictPayloadInvalid || !strings.HasPrefix(r.Reason, "payload_json.externalSupplierId: is required") {
		t.Errorf("refusal = %+v, want payload_invalid naming payload_json.externalSupplierId", r)
	}
}

func TestSupportsOnlyProvidersThatPushPurchaseOrders(t *testing.T) {
	t.Parallel()
	cmd := purchaseorder.NewCommand(nil)
	if !cmd.Supports(&capture{}) || !cmd.Supports(provider.NewSandbox(provider.SandboxConfig{})) {
		t.Error("a PurchaseOrderPusher must be supported")
	}
	if cmd.Supports(nameOnly{}) {
		t.Error("a provider without PushPurchaseOrder must not be supported")
	}
}

type nameOnly struct{}

func (nameOnly) Name() string { return "name-only" }
