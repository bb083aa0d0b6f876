package provider

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"integration-outbox/internal/testenv"
	"integration-outbox/internal/testenv/qboschema"
)

// validQBO fails the test unless body is a valid root ("PurchaseOrder",
// "Vendor") in Intuit's data model (qboschema, from the XSD of Intuit's
// Java SDK).
func validQBO(t *testing.T, root string, body []byte) {
	t.Helper()
	if err := qboschema.Validate(root, body); err != nil {
		t.Errorf("request body is not a valid %s in Intuit's data model: %v\n%s", root, err, body)
	}
}

// quickBooksStandIn starts a stand-in company holding one vendor ("41"
// is not an Id it hands out: the vendor's Id is returned).
func quickBooksStandIn(t *testing.T) (*testenv.QuickBooksStandIn, string) {
	t.Helper()
	qb, err := testenv.StartQuickBooksStandIn("9130", testToken)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(qb.Close)
	return qb, qb.AddVendor("Acme Supplies")
}

func standInConn(qb *testenv.QuickBooksStandIn, extra map[string]string) Connection {
	cfg, _ := json.Marshal(qb.QuickBooksConfig(extra))
	return Connection{ID: "conn-1", Provider: NameQuickBooks, Config: cfg}
}

// TestQuickBooksPurchaseOrdersThroughIntuitsModel: every purchase order
// the provider sends goes to the stand-in, which refuses any body outside
// Intuit's data model and reference rules: a create with item and account
// lines, a sparse update with the remembered SyncToken, a stale SyncToken
// re-read once, and a repeated requestid answered with its first result
// (one purchase order, not two).
func TestQuickBooksPurchaseOrdersThroughIntuitsModel(t *testing.T) {
	t.Parallel()
	qb, vendor := quickBooksStandIn(t)
	q := newTestQuickBooks(t)
	conn := standInConn(qb, map[string]string{"expenseAccountId": "80"})
	cmd := accountingCommand(vendor, `{"items": {"s-1": {"itemId": "7"}}}`, "s-1", "s-2")
	ctx := context.Background()

	res, err := q.PushPurchaseOrder(ctx, conn, accountingCred(), cmd)
	if err != nil || res.Status != StatusCompleted || res.Document == nil || res.Document.SyncToken != "0" {
		t.Fatalf("create = %+v, %v (refusals %v)", res, err, qb.Refusals())
	}
	again, err := q.PushPurchaseOrder(ctx, conn, accountingCred(), cmd)
	if err != nil || again.ExternalID != res.ExternalID || len(qb.PurchaseOrders()) != 1 {
		t.Errorf("the same requestid again = %+v, %v; %d purchase orders, want the first answer and 1", again, err, len(qb.PurchaseOrders()))
	}

	cmd.IdempotencyKey, cmd.Document = "idem-2", res.Document
	upd, err := q.PushPurchaseOrder(ctx, conn, accountingCred(), cmd)
	if err != nil || upd.Document.SyncToken != "1" || upd.ExternalID != res.ExternalID {
		t.Fatalf("sparse update = %+v, %v (refusals %v)", upd, err, qb.Refusals())
	}

	// Someone edits the order in QuickBooks: our SyncToken is stale.
	qb.Touch(res.ExternalID)
	cmd.IdempotencyKey, cmd.Document = "idem-3", upd.Document
	after, err := q.PushPurchaseOrder(ctx, conn, accountingCred(), cmd)
	if err != nil || after.Document.SyncToken != "3" {
		t.Fatalf("update after an edit = %+v, %v (refusals %v)", after, err, qb.Refusals())
	}
	if r := qb.Refusals(); len(r) != 1 || !strings.HasPrefix(r[0], "5010 ") {
		t.Errorf("refusals %v, want the one stale SyncToken", r)
	}
	po := qb.PurchaseOrders()[0]
	if lines, _ := po.Fields["Line"].([]any); len(lines) != 2 || po.Fields["DocNumber"] != "PO-1001" {
		t.Errorf("purchase order held: %+v", po)
	}
}

// TestQuickBooksAPAccount: a company with two accounts-payable accounts
// refuses a purchase order without APAccountRef (Intuit: required where
// more than one exists), and takes it with config_json.apAccountId.
func TestQuickBooksAPAccount(t *testing.T) {
	t.Parallel()
	qb, vendor := quickBooksStandIn(t)
	qb.APAccounts = 2
	q := newTestQuickBooks(t)
	cmd := accountingCommand(vendor, `{}`, "s-1")

	_, err := q.PushPurchaseOrder(context.Background(), standInConn(qb, map[string]string{"expenseAccountId": "80"}), accountingCred(), cmd)
	if e := asError(t, err); e.Kind != Rejected || !strings.Contains(e.Message, "APAccountRef") {
		t.Fatalf("without apAccountId = %v, want Rejected naming APAccountRef", err)
	}
	// A new command: the refused one's requestid would get its first
	// answer again.
	cmd.IdempotencyKey = "idem-after-config"
	res, err := q.PushPurchaseOrder(context.Background(), standInConn(qb, map[string]string{"expenseAccountId": "80", "apAccountId": "33"}),
		accountingCred(), cmd)
	if err != nil || res.Status != StatusCompleted {
		t.Fatalf("with apAccountId = %+v, %v", res, err)
	}
	if got := qb.PurchaseOrders()[0].Fields["APAccountRef"]; got == nil || got.(map[string]any)["value"] != "33" {
		t.Errorf("APAccountRef sent %v, want 33", got)
	}
	if _, err := ParseQuickBooksConfig(json.RawMessage(`{"realmId": "9130", "apAccountId": 33}`), false); err == nil ||
		!strings.Contains(err.Error(), "apAccountId") {
		t.Errorf("a number as apAccountId: %v, want an error naming it", err)
	}
}

// TestQuickBooksVendorsThroughIntuitsModel: a supplier pushed to the
// stand-in creates a vendor valid in Intuit's model; a second supplier of
// the same name meets 6240 and finds the vendor by its DisplayName; a push
// with the remembered document sparse-updates it.
func TestQuickBooksVendorsThroughIntuitsModel(t *testing.T) {
	t.Parallel()
	qb, existing := quickBooksStandIn(t)
	q := newTestQuickBooks(t)
	conn := standInConn(qb, nil)
	ctx := context.Background()
	push := func(key, name string, doc *Document) (Result, error) {
		return q.PushSupplier(ctx, conn, accountingCred(), SupplierPush{CommandType: "push_supplier", IdempotencyKey: key,
			Supplier: Supplier{ID: "sup-" + key, Name: name, Code: "SUP-" + key, Email: "ap@" + key + ".example",
				Phone: "+44 20 7946 0000", CurrencyCode: "GBP", TaxNumber: "GB123",
				AddressLines: []string{"1 Road"}, City: "London", PostalCode: "E1", Country: "GB"}, Document: doc})
	}
	created, err := push("k1", "Bolt & Nut Co", nil)
	if err != nil || created.Document == nil {
		t.Fatalf("create = %+v, %v (refusals %v)", created, err, qb.Refusals())
	}
	found, err := push("k2", "Acme Supplies", nil)
	if err != nil || found.ExternalID != existing {
		t.Fatalf("a name QuickBooks has = %+v, %v; want vendor %s (refusals %v)", found, err, existing, qb.Refusals())
	}
	if r := qb.Refusals(); len(r) != 1 || !strings.HasPrefix(r[0], "6240 ") {
		t.Errorf("refusals %v, want the one duplicate name", r)
	}
	upd, err := push("k3", "Bolt & Nut Co", created.Document)
	if err != nil || upd.ExternalID != created.ExternalID || upd.Document.SyncToken != "1" {
		t.Fatalf("update = %+v, %v (refusals %v)", upd, err, qb.Refusals())
	}
	if n := len(qb.Vendors()); n != 2 {
		t.Errorf("%d vendors, want 2", n)
	}
}

// TestTheStandInRefusesWhatIntuitRefuses: bodies outside the model or the
// reference's rules are answered with a ValidationFault and reach no
// record: the stand-in cannot pass a body QuickBooks would refuse.
func TestTheStandInRefusesWhatIntuitRefuses(t *testing.T) {
	t.Parallel()
	qb, vendor := quickBooksStandIn(t)
	for name, body := range map[string]string{
		"an unknown key":       `{"VendorRef":{"value":"` + vendor + `"},"Line":[{"DetailType":"AccountBasedExpenseLineDetail","Amount":1,"AccountBasedExpenseLineDetail":{"AccountRef":{"value":"80"}}}],"Notes":"x"}`,
		"no VendorRef":         `{"Line":[{"DetailType":"AccountBasedExpenseLineDetail","Amount":1,"AccountBasedExpenseLineDetail":{"AccountRef":{"value":"80"}}}]}`,
		"no line":              `{"VendorRef":{"value":"` + vendor + `"},"Line":[]}`,
		"an item without item": `{"VendorRef":{"value":"` + vendor + `"},"Line":[{"DetailType":"ItemBasedExpenseLineDetail","Amount":1,"ItemBasedExpenseLineDetail":{"Qty":1}}]}`,
		"an unknown vendor":    `{"VendorRef":{"value":"999"},"Line":[{"DetailType":"AccountBasedExpenseLineDetail","Amount":1,"AccountBasedExpenseLineDetail":{"AccountRef":{"value":"80"}}}]}`,
		"an update without Id": `{"SyncToken":"0","VendorRef":{"value":"` + vendor + `"},"Line":[{"DetailType":"AccountBasedExpenseLineDetail","Amount":1,"AccountBasedExpenseLineDetail":{"AccountRef":{"value":"80"}}}]}`,
	} {
		q := NewQuickBooks(AccountingConfig{AllowPrivateNetworks: true})
		cfg, _ := ParseQuickBooksConfig(standInConn(qb, nil).Config, true)
		_, _, err := q.l.post(context.Background(), cfg, "Bearer "+testToken, qboPurchaseOrderEntity, "r-"+name, []byte(body), accountingCred())
		if e, ok := err.(*Error); !ok || e.Kind != Rejected {
			t.Errorf("%s: %v, want refused", name, err)
		}
	}
	if n := len(qb.PurchaseOrders()); n != 0 {
		t.Errorf("%d purchase orders recorded from refused bodies", n)
	}
}
