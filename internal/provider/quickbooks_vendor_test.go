package provider

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// qboVendorOf is what the tests read of a vendor request body.
type qboVendorOf struct {
	ID, SyncToken            string
	Sparse                   bool `json:"sparse"`
	DisplayName, CompanyName string
	PrimaryEmailAddr         *struct{ Address string }
	PrimaryPhone             *struct{ FreeFormNumber string }
	BillAddr                 map[string]string
	TaxIdentifier, AcctNum   string
	CurrencyRef              *qboRef
}

func decodeQBOVendor(t *testing.T, b []byte) qboVendorOf {
	t.Helper()
	var v qboVendorOf
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func qboSupplier() Supplier {
	s := testSupplier()
	s.Name = "Acme's Fresh Supplies"
	return s
}

// TestQuickBooksCreatesThenSparselyUpdatesTheVendor: the first push
// creates the vendor with every field the host gave, under a requestid from
// our key; Id and SyncToken are the document; a push that knows them sends a
// sparse update without the currency. Both bodies are valid Vendors in
// Intuit's data model (qboschema).
func TestQuickBooksCreatesThenSparselyUpdatesTheVendor(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, reply{status: 200, file: "quickbooks/vendor_created.json"}, reply{status: 200, file: "quickbooks/vendor_updated.json"})
	q := newTestQuickBooks(t)
	cmd := supplierCommand(qboSupplier())

	res, err := q.PushSupplier(context.Background(), quickBooksConn(api), accountingCred(), cmd)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != StatusCompleted || res.ExternalID != "58" || res.Action != SupplierCreated ||
		res.Document == nil || *res.Document != (Document{ID: "58", SyncToken: "0"}) {
		t.Errorf("create = %+v", res)
	}
	update := supplierCommand(Supplier{ID: cmd.Supplier.ID, Name: "Acme's Fresh Supplies Ltd", CurrencyCode: "GBP"})
	update.IdempotencyKey = "sup-2"
	update.Document = res.Document
	res, err = q.PushSupplier(context.Background(), quickBooksConn(api), accountingCred(), update)
	if err != nil || res.Action != SupplierUpdated || *res.Document != (Document{ID: "58", SyncToken: "1"}) {
		t.Fatalf("update = %+v, %v", res, err)
	}

	got := api.requests()
	if len(got) != 2 {
		t.Fatalf("%d requests, want 2", len(got))
	}
	for i, r := range got {
		validQBO(t, "Vendor", r.body)
		if r.method != http.MethodPost || r.path != "/v3/company/9130/vendor" || r.query.Get("minorversion") != "75" ||
			r.header.Get("Authorization") != "Bearer "+testToken || r.header.Get("Content-Type") != "application/json" {
			t.Errorf("request %d: %s %s %v %v", i, r.method, r.path, r.query, r.header)
		}
	}
	if got[0].query.Get("requestid") != "sup-1" || got[1].query.Get("requestid") != "sup-2" {
		t.Errorf("requestids %q, %q", got[0].query.Get("requestid"), got[1].query.Get("requestid"))
	}
	v := decodeQBOVendor(t, got[0].body)
	if v.ID != "" || v.Sparse || v.DisplayName != "Acme's Fresh Supplies" || v.CompanyName != v.DisplayName ||
		v.PrimaryEmailAddr == nil || v.PrimaryEmailAddr.Address != "orders@acme.example" ||
		v.PrimaryPhone == nil || v.PrimaryPhone.FreeFormNumber != "+44 113 496 0000" ||
		v.TaxIdentifier != "GB123456789" || v.AcctNum != "SUP-001" || v.CurrencyRef == nil || v.CurrencyRef.Value != "GBP" {
		t.Errorf("create body = %s", got[0].body)
	}
	if !equalMaps(v.BillAddr, map[string]string{"Line1": "Unit 4", "Line2": "12 Dock Road", "City": "Leeds",
		"PostalCode": "LS1 4AB", "Country": "United Kingdom"}) {
		t.Errorf("BillAddr = %v", v.BillAddr)
	}
	if u := decodeQBOVendor(t, got[1].body); u.ID != "58" || u.SyncToken != "0" || !u.Sparse || u.CurrencyRef != nil ||
		u.DisplayName != "Acme's Fresh Supplies Ltd" || u.PrimaryEmailAddr != nil || u.BillAddr != nil {
		t.Errorf("update body = %s", got[1].body)
	}
}

// TestQuickBooksVendorStaleSyncTokenIsReadOnceAndRetried: a 5010 on the
// vendor's update reads the vendor's SyncToken and sends the update once
// more, as for purchase orders.
func TestQuickBooksVendorStaleSyncTokenIsReadOnceAndRetried(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, reply{status: 400, file: "quickbooks/stale_400.json"}, reply{status: 200, file: "quickbooks/vendor_read.json"},
		reply{status: 200, file: "quickbooks/vendor_updated_after_stale.json"})
	q := newTestQuickBooks(t)
	cmd := supplierCommand(qboSupplier())
	cmd.Document = &Document{ID: "58", SyncToken: "1"}
	res, err := q.PushSupplier(context.Background(), quickBooksConn(api), accountingCred(), cmd)
	if err != nil || res.Action != SupplierUpdated || *res.Document != (Document{ID: "58", SyncToken: "4"}) {
		t.Fatalf("result = %+v, %v", res, err)
	}
	got := api.requests()
	if len(got) != 3 {
		t.Fatalf("%d requests, want 3", len(got))
	}
	if r := got[1]; r.method != http.MethodGet || r.path != "/v3/company/9130/vendor/58" {
		t.Errorf("read: %s %s", r.method, r.path)
	}
	first, retry := decodeQBOVendor(t, got[0].body), decodeQBOVendor(t, got[2].body)
	if first.SyncToken != "1" || retry.SyncToken != "3" || !retry.Sparse || retry.ID != "58" {
		t.Errorf("sync tokens sent: %q then %q", first.SyncToken, retry.SyncToken)
	}
	validQBO(t, "Vendor", got[2].body)
	if r := got[2].query.Get("requestid"); r != QuickBooksRequestID("sup-1#synctoken=3") {
		t.Errorf("retry requestid %q", r)
	}
}

// TestQuickBooksDuplicateNameLinksToTheVendor: fault 6240 on a create
// queries the vendor of that DisplayName, the quote escaped, and links to it.
func TestQuickBooksDuplicateNameLinksToTheVendor(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, reply{status: 400, file: "quickbooks/duplicate_name_400.json"}, reply{status: 200, file: "quickbooks/vendor_query.json"})
	q := newTestQuickBooks(t)
	res, err := q.PushSupplier(context.Background(), quickBooksConn(api), accountingCred(), supplierCommand(qboSupplier()))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != StatusCompleted || res.Action != SupplierLinked || res.ExternalID != "31" ||
		res.Document == nil || *res.Document != (Document{ID: "31", SyncToken: "7"}) {
		t.Errorf("result = %+v", res)
	}
	got := api.requests()
	if len(got) != 2 {
		t.Fatalf("%d requests, want 2", len(got))
	}
	if r := got[1]; r.method != http.MethodGet || r.path != "/v3/company/9130/query" || r.query.Get("minorversion") != "75" ||
		r.query.Get("query") != `select * from Vendor where DisplayName = 'Acme\'s Fresh Supplies'` ||
		r.header.Get("Authorization") != "Bearer "+testToken {
		t.Errorf("query: %s %s %v", r.method, r.path, r.query)
	}
}

// TestQuickBooksDuplicateNameRefusals: a taken name no vendor has (a
// customer's or an employee's), and a rename onto a taken name, are
// permanent refusals that say so.
func TestQuickBooksDuplicateNameRefusals(t *testing.T) {
	t.Parallel()
	q := newTestQuickBooks(t)
	api := newFakeAPI(t, reply{status: 400, file: "quickbooks/duplicate_name_400.json"}, reply{status: 200, file: "quickbooks/vendor_query_empty.json"})
	_, err := q.PushSupplier(context.Background(), quickBooksConn(api), accountingCred(), supplierCommand(qboSupplier()))
	if e := asError(t, err); e.Kind != Rejected || !strings.Contains(e.Message, "no active vendor of that name was found") ||
		!strings.Contains(e.Message, "customer or an employee") {
		t.Errorf("nothing to link = %v", err)
	}

	api = newFakeAPI(t, reply{status: 400, file: "quickbooks/duplicate_name_400.json"})
	cmd := supplierCommand(qboSupplier())
	cmd.Document = &Document{ID: "58", SyncToken: "2"}
	_, err = q.PushSupplier(context.Background(), quickBooksConn(api), accountingCred(), cmd)
	if e := asError(t, err); e.Kind != Rejected || e.StatusCode != 400 || !strings.Contains(e.Message, "refused to rename vendor 58") ||
		!strings.Contains(e.Message, "6240 Duplicate Name Exists Error") {
		t.Errorf("rename onto a taken name = %v", err)
	}
	if n := len(api.requests()); n != 1 {
		t.Errorf("%d requests for a rename, want 1", n)
	}

	// The query is classified as every call: throttled pauses the connection.
	api = newFakeAPI(t, reply{status: 400, file: "quickbooks/duplicate_name_400.json"}, reply{status: 429, file: "quickbooks/throttled_429.json"})
	_, err = q.PushSupplier(context.Background(), quickBooksConn(api), accountingCred(), supplierCommand(qboSupplier()))
	if e := asError(t, err); e.Kind != Retryable || !e.PauseConnection || !strings.Contains(e.Message, "finding the vendor") {
		t.Errorf("query throttled = %+v", e)
	}
}

func TestQuickBooksQuote(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"Acme":             `'Acme'`,
		"Acme's":           `'Acme\'s'`,
		`"Fresh" O'Brien'`: `'"Fresh" O\'Brien\''`,
	} {
		if got := quickBooksQuote(in); got != want {
			t.Errorf("quickBooksQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
