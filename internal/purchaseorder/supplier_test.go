package purchaseorder_test

import (
	"context"
	"strings"
	"testing"
	"time"

	docs "integration-outbox/internal/document"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/push"
	"integration-outbox/internal/testenv"
)

// An order whose payload has no externalSupplierId goes to the contact its
// host supplier's push_supplier created through the job's connection; it
// waits for that push while it is still to be delivered, and is refused,
// naming the supplier and push_supplier, when there is none. The lookups
// are the job's connection's and organization's only.
func TestLoadFindsTheSuppliersContactOrWaitsForItsPush(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	ctx := context.Background()
	org, otherOrg := f.NewID(t), f.NewID(t)
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "xero"})
	otherConn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "xero"})
	foreignConn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: otherOrg, Provider: "xero"})
	mapped, onOrder, pending, failing, none, delivered, elsewhere, foreign :=
		f.NewID(t), f.NewID(t), f.NewID(t), f.NewID(t), f.NewID(t), f.NewID(t), f.NewID(t), f.NewID(t)
	for _, m := range []struct{ supplier, contact string }{{mapped, "CONTACT-MAPPED"}, {onOrder, "CONTACT-ON-ORDER"}} {
		if err := docs.Remember(ctx, f.Pool, docs.Key{ConnectionID: conn, EntityType: "supplier",
			EntityID: m.supplier, Provider: "xero"}, provider.Document{ID: m.contact}); err != nil {
			t.Fatal(err)
		}
	}
	// Another connection's contact is not this one's.
	if err := docs.Remember(ctx, f.Pool, docs.Key{ConnectionID: otherConn, EntityType: "supplier",
		EntityID: elsewhere, Provider: "xero"}, provider.Document{ID: "CONTACT-ELSEWHERE"}); err != nil {
		t.Fatal(err)
	}
	supplierPush := func(connID, orgID, supplier, status string, due *time.Time) string {
		return f.Command(t, testenv.CommandOpts{OrganizationID: orgID, ConnectionID: connID, Provider: "xero",
			CommandType: "push_supplier", EntityID: supplier, Payload: map[string]any{"name": "S"}, Status: status,
			NextAttemptAt: due})
	}
	later := time.Now().Add(30 * time.Minute)
	pendingPush := supplierPush(conn, org, pending, "queued", nil)
	failingPush := supplierPush(conn, org, failing, "failed", &later)
	supplierPush(conn, org, delivered, "completed", nil)
	supplierPush(otherConn, org, elsewhere, "queued", nil)
	supplierPush(foreignConn, otherOrg, foreign, "queued", nil)

	orderOf := func(supplier string) string {
		po := f.PurchaseOrder(t, org, "", 1)
		if supplier != "" {
			if _, err := f.Pool.Exec(ctx, `update purchase_orders set supplier_id = $1 where id = $2`, supplier, po); err != nil {
				t.Fatal(err)
			}
		}
		return po
	}
	type want struct {
		contact  string // sent with this externalSupplierId
		waitsFor string // waits for this outbox row
		refused  string // refused, the reason containing this
	}
	cases := []struct {
		name    string
		order   string
		payload string
		want    want
	}{
		{"externalSupplierId wins", orderOf(mapped), `{"externalSupplierId":"GIVEN","supplierId":"` + pending + `"}`, want{contact: "GIVEN"}},
		{"payload supplierId mapped", orderOf(""), `{"supplierId":"` + mapped + `"}`, want{contact: "CONTACT-MAPPED"}},
		{"order's supplier_id mapped", orderOf(onOrder), `{}`, want{contact: "CONTACT-ON-ORDER"}},
		{"payload supplierId before the order's", orderOf(none), `{"supplierId":"` + mapped + `"}`, want{contact: "CONTACT-MAPPED"}},
		{"push queued: waits", orderOf(""), `{"supplierId":"` + pending + `"}`, want{waitsFor: pendingPush}},
		{"push failed with a retry due: waits", orderOf(failing), `{}`, want{waitsFor: failingPush}},
		{"no push at all", orderOf(""), `{"supplierId":"` + none + `"}`, want{refused: "enqueue push_supplier for supplier " + none}},
		{"push delivered, no contact", orderOf(""), `{"supplierId":"` + delivered + `"}`, want{refused: "supplier " + delivered + " has no contact"}},
		{"contact and push of another connection", orderOf(elsewhere), `{}`, want{refused: "supplier " + elsewhere + " has no contact"}},
		{"push of another organization", orderOf(""), `{"supplierId":"` + foreign + `"}`, want{refused: "supplier " + foreign + " has no contact"}},
		{"supplier id not a uuid", orderOf(""), `{"supplierId":"SUP 7"}`, want{refused: "supplier SUP 7 has no contact"}},
		{"no supplier named", orderOf(""), `{}`, want{refused: "payload_json.externalSupplierId: is required"}},
		{"supplierId not a string", orderOf(""), `{"supplierId":7}`, want{refused: "payload_json.supplierId: must be a string"}},
	}
	jobs := make([]outbox.Job, len(cases))
	for i, c := range cases {
		jobs[i] = job(org, c.order, "", c.payload)
		jobs[i].ConnectionID = conn
		jobs[i].Connection.ID, jobs[i].Connection.Provider = conn, "xero"
	}
	ds, err := purchaseorder.NewCommand(f.Pool).Load(ctx, jobs)
	if err != nil || len(ds) != len(cases) {
		t.Fatalf("Load = %d deliveries, %v", len(ds), err)
	}
	for i, c := range cases {
		d := ds[i]
		switch {
		case c.want.contact != "":
			if d.Wait != nil || d.Refusal != nil {
				t.Errorf("%s: wait %+v, refusal %+v; want it sent", c.name, d.Wait, d.Refusal)
			} else if got := send(t, d).ExternalSupplierID; got != c.want.contact {
				t.Errorf("%s: sent to supplier %q, want %q", c.name, got, c.want.contact)
			}
		case c.want.waitsFor != "":
			if d.Wait == nil || d.Wait.For != c.want.waitsFor || d.Send != nil || d.Refusal != nil {
				t.Errorf("%s: delivery %+v (wait %+v), want a wait for %s", c.name, d, d.Wait, c.want.waitsFor)
			} else if !strings.Contains(d.Wait.Reason, "push_supplier "+c.want.waitsFor) {
				t.Errorf("%s: wait reason %q does not name the push", c.name, d.Wait.Reason)
			}
		default:
			if d.Refusal == nil || d.Refusal.Conflict != outbox.ConflictPayloadInvalid || !strings.Contains(d.Refusal.Reason, c.want.refused) {
				t.Errorf("%s: refusal %+v (wait %+v), want payload_invalid containing %q", c.name, d.Refusal, d.Wait, c.want.refused)
			}
		}
	}
	// A failing push due in 30 minutes: the order looks again after it,
	// not every few minutes meanwhile.
	if w := ds[5].Wait; w != nil && (w.Recheck < 30*time.Minute || w.Recheck > 30*time.Minute+push.WaitRecheck+time.Minute) {
		t.Errorf("wait for a push due in 30m rechecks in %s", w.Recheck)
	}
}
