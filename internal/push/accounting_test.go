package push_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"integration-outbox/internal/testenv"
)

// documented replies the provider package's documented answers, in order.
func documented(t *testing.T, files ...string) *testenv.Receiver {
	t.Helper()
	return testenv.NewReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n > len(files) {
			t.Errorf("unexpected request %d: %s %s", n, r.Method, r.URL)
			w.WriteHeader(http.StatusTeapot)
			return
		}
		status, file, _ := strings.Cut(files[n-1], " ")
		b, err := os.ReadFile(filepath.Join("..", "provider", "testdata", file))
		if err != nil {
			t.Error(err)
		}
		code := map[string]int{"200": 200, "401": 401, "403": 403}[status]
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		w.Write(b)
	})
}

// TestXeroThroughTheWorker: a Xero command whose first call meets an
// expired token is retried once with the credential resolved again and
// completes with the PurchaseOrderID as provider_reference; the next command
// for the same order updates that purchase order.
func TestXeroThroughTheWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := documented(t, "401 xero/unauthorized_401.json", "200 xero/created.json", "200 xero/updated.json")
	ref := secret(t, `{"token":"xero-access-token"}`, b.org)
	ids := b.f.PurchaseOrderCommand(t, testenv.PurchaseOrderCommandOpts{Lines: 2,
		Connection: testenv.ConnectionOpts{OrganizationID: b.org, Provider: "xero", CredentialReference: ref,
			Config: map[string]string{"tenantId": "tenant-7", "accountCode": "300", "apiBaseUrl": rc.URL}},
		Command: testenv.CommandOpts{Payload: map[string]string{"externalSupplierId": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"}}})
	const poID = "8c1b7e52-3d4f-4a6b-9c8d-7e6f5a4b3c2d"

	b.handle(t, b.claim(t, 10))
	r := b.f.Row(t, ids.CommandID)
	if r.Status != "completed" || deref(r.ProviderReference) != poID {
		t.Fatalf("row = %s, provider_reference %q, last_error %q", r.Status, deref(r.ProviderReference), deref(r.LastError))
	}
	if got := b.secrets.gets.Load(); got != 2 {
		t.Errorf("%d secret reads, want 2 (the 401 invalidates the cached credential once)", got)
	}

	second := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: ids.ConnectionID, Provider: "xero",
		EntityID: ids.PurchaseOrderID, Payload: map[string]string{"externalSupplierId": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"}})
	b.handle(t, b.claim(t, 10))
	if r := b.f.Row(t, second); r.Status != "completed" || deref(r.ProviderReference) != poID {
		t.Fatalf("second row = %s, provider_reference %q, last_error %q", r.Status, deref(r.ProviderReference), deref(r.LastError))
	}
	reqs := rc.Requests()
	if len(reqs) != 3 || !strings.HasPrefix(reqs[1].URI, "/PurchaseOrders?") || !strings.HasPrefix(reqs[2].URI, "/PurchaseOrders/"+poID+"?") {
		t.Fatalf("requests %v", uris(reqs))
	}
	if reqs[0].Header.Get("Authorization") != "Bearer xero-access-token" || reqs[2].Header.Get("xero-tenant-id") != "tenant-7" {
		t.Errorf("headers %v", reqs[0].Header)
	}
}

func uris(reqs []testenv.Request) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, r.Method+" "+r.URI)
	}
	return out
}

// TestQuickBooksFaultInA200IsRejectedThroughTheWorker: QuickBooks' Fault in
// a 200 answer dead-letters the row as provider_rejected with its code and
// message.
func TestQuickBooksFaultInA200IsRejectedThroughTheWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := documented(t, "200 quickbooks/fault_200.json")
	ref := secret(t, `{"token":"qbo-access-token"}`, b.org)
	ids := b.f.PurchaseOrderCommand(t, testenv.PurchaseOrderCommandOpts{
		Connection: testenv.ConnectionOpts{OrganizationID: b.org, Provider: "quickbooks", CredentialReference: ref,
			Config: map[string]string{"realmId": "9130", "expenseAccountId": "80", "apiBaseUrl": rc.URL}},
		Command: testenv.CommandOpts{Payload: map[string]string{"externalSupplierId": "41"}}})
	b.handle(t, b.claim(t, 10))
	r := b.f.Row(t, ids.CommandID)
	if r.Status != "dead_letter" || !strings.Contains(deref(r.LastError), "6140 Duplicate Document Number Error") {
		t.Fatalf("row = %s, last_error %q", r.Status, deref(r.LastError))
	}
	var conflict string
	if err := b.f.Pool.QueryRow(context.Background(), `select conflict_type from external_integration_conflicts
		where local_entity_id = $1`, ids.PurchaseOrderID).Scan(&conflict); err != nil || conflict != "provider_rejected" {
		t.Errorf("conflict %q, %v; want provider_rejected", conflict, err)
	}
	if reqs := rc.Requests(); len(reqs) != 1 || !strings.HasPrefix(reqs[0].URI, "/v3/company/9130/purchaseorder?") {
		t.Errorf("requests %v", uris(reqs))
	}
}

// TestACommandRefusedBeforeAnyCallTakesNoCallSlot: a Xero command whose
// supplier id is not a GUID, and one with a line without an account, end
// in dead_letter (payload_invalid) without a call and without taking a
// call slot of the connection (one a minute here): the next command still
// finds the connection's first slot free.
func TestACommandRefusedBeforeAnyCallTakesNoCallSlot(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *options) { o.paced = true })
	rc := documented(t, "200 xero/created.json")
	ref := secret(t, `{"token":"xero-access-token"}`, b.org)
	// No default account: a line without a mapped account is refused.
	ids := b.f.PurchaseOrderCommand(t, testenv.PurchaseOrderCommandOpts{
		Connection: testenv.ConnectionOpts{OrganizationID: b.org, Provider: "xero", CredentialReference: ref,
			Config: map[string]any{"tenantId": "tenant-7", "apiBaseUrl": rc.URL, "callsPerMinute": 1}},
		Command: testenv.CommandOpts{Payload: map[string]string{"externalSupplierId": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"}}})
	notGUID := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: ids.ConnectionID, Provider: "xero",
		EntityID: b.f.PurchaseOrder(t, b.org, "", 1), Payload: map[string]string{"externalSupplierId": "SUP-1"}})
	b.handle(t, b.claim(t, 10))
	for id, says := range map[string]string{ids.CommandID: "account", notGUID: `"SUP-1" is not a Xero ContactID`} {
		var conflict string
		if err := b.f.Pool.QueryRow(context.Background(), `select conflict_type from external_integration_conflicts
			where outbox_id = $1`, id).Scan(&conflict); err != nil {
			t.Fatal(err)
		}
		if r := b.f.Row(t, id); r.Status != "dead_letter" || conflict != "payload_invalid" || !strings.Contains(deref(r.LastError), says) {
			t.Errorf("row %s = %s (%s), last_error %q; want dead_letter, payload_invalid, saying %q", id, r.Status, conflict, deref(r.LastError), says)
		}
	}
	var slotsTaken int
	if err := b.f.Pool.QueryRow(context.Background(), `select count(*) from integration_outbox_connection_pace
		where connection_id = $1 and next_call_at > now()`, ids.ConnectionID).Scan(&slotsTaken); err != nil {
		t.Fatal(err)
	}
	if slotsTaken != 0 {
		t.Errorf("the refused commands took the connection's call slots")
	}
	if reqs := rc.Requests(); len(reqs) != 0 {
		t.Errorf("requests %v, want none", uris(reqs))
	}

	// A command that will be sent takes the first slot, at once.
	po := b.f.PurchaseOrder(t, b.org, "", 1)
	var item string
	if err := b.f.Pool.QueryRow(context.Background(), `select stock_item_id::text from purchase_order_lines
		where purchase_order_id = $1`, po).Scan(&item); err != nil {
		t.Fatal(err)
	}
	mapped := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: ids.ConnectionID, Provider: "xero",
		EntityID: po, Payload: map[string]any{"externalSupplierId": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
			"items": map[string]any{item: map[string]string{"accountCode": "300"}}}})
	b.handle(t, b.claim(t, 10))
	if r := b.f.Row(t, mapped); r.Status != "completed" {
		t.Errorf("the next command is %s, last_error %q; want completed in the connection's first slot", r.Status, deref(r.LastError))
	}
}
