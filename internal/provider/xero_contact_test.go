package provider

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Fixtures of the supplier tests.
const (
	testXeroContactID = "3f2e1d0c-9b8a-4f7e-8d6c-5b4a3f2e1d0c"
	// testXeroNamedID is the contact of contacts_found.json (found by name),
	// testXeroNumberedID the one of contacts_found_by_number.json.
	testXeroNamedID    = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
	testXeroNumberedID = "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
)

// testSupplier is a supplier with every field set; its name has quotes.
func testSupplier() Supplier {
	return Supplier{ID: "7b0c3a2e-1d4f-4e5a-9b6c-8d7e6f5a4b3c", Name: `Acme "Fresh" Supplies`, Email: "orders@acme.example",
		Phone: "+44 113 496 0000", AddressLines: []string{"Unit 4", "12 Dock Road"}, City: "Leeds", PostalCode: "LS1 4AB",
		Country: "United Kingdom", TaxNumber: "GB123456789", CurrencyCode: "GBP", Code: "SUP-001"}
}

func supplierCommand(s Supplier) SupplierPush {
	return SupplierPush{CommandType: "push_supplier", IdempotencyKey: "sup-1", Supplier: s}
}

// xeroContactBodyOf is what the tests read of a contact request body.
type xeroContactBodyOf struct {
	Contacts []struct {
		ContactID, Name, ContactNumber, EmailAddress, TaxNumber, DefaultCurrency string
		Addresses                                                                []map[string]string
		Phones                                                                   []map[string]string
	}
}

func decodeXeroContact(t *testing.T, b []byte) xeroContactBodyOf {
	t.Helper()
	var body xeroContactBodyOf
	if err := json.Unmarshal(b, &body); err != nil || len(body.Contacts) != 1 {
		t.Fatalf("contact body %s: %v", b, err)
	}
	return body
}

// TestXeroCreatesThenUpdatesTheContact: the first push creates the contact
// with every field the host gave, under our key and the tenant; its
// ContactID is the result, the document and the provider reference; a push
// that knows the document updates that contact. Both bodies match our
// schema of Xero's.
func TestXeroCreatesThenUpdatesTheContact(t *testing.T) {
	t.Parallel()
	schema := compileSchema(t, "xero_contacts.schema.json")
	api := newFakeAPI(t, reply{status: 200, file: "xero/contact_created.json"}, reply{status: 200, file: "xero/contact_updated.json"})
	x := newTestXero(t)
	cmd := supplierCommand(testSupplier())

	res, err := x.PushSupplier(context.Background(), xeroConn(api, ""), accountingCred(), cmd)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != StatusCompleted || res.ExternalID != testXeroContactID || res.StatusCode != 200 || res.Action != SupplierCreated ||
		res.Document == nil || *res.Document != (Document{ID: testXeroContactID}) {
		t.Errorf("create = %+v", res)
	}

	renamed := supplierCommand(Supplier{ID: cmd.Supplier.ID, Name: "Acme Fresh Supplies Ltd", Code: "SUP-001"})
	renamed.IdempotencyKey = "sup-2"
	renamed.Document = res.Document
	res, err = x.PushSupplier(context.Background(), xeroConn(api, ""), accountingCred(), renamed)
	if err != nil || res.ExternalID != testXeroContactID || res.Action != SupplierUpdated || *res.Document != (Document{ID: testXeroContactID}) {
		t.Fatalf("update = %+v, %v", res, err)
	}

	got := api.requests()
	if len(got) != 2 {
		t.Fatalf("%d requests, want 2", len(got))
	}
	for i, r := range got {
		validBody(t, schema, r.body)
		if r.method != http.MethodPost || r.path != "/api.xro/2.0/Contacts" || r.query.Get("summarizeErrors") != "false" ||
			r.header.Get("Authorization") != "Bearer "+testToken || r.header.Get("xero-tenant-id") != "tenant-7" ||
			r.header.Get("Content-Type") != "application/json" || r.header.Get("Accept") != "application/json" {
			t.Errorf("request %d: %s %s %v %v", i, r.method, r.path, r.query, r.header)
		}
	}
	if k1, k2 := got[0].header.Get("Idempotency-Key"), got[1].header.Get("Idempotency-Key"); k1 != "sup-1" || k2 != "sup-2" {
		t.Errorf("Idempotency-Keys %q, %q", k1, k2)
	}

	c := decodeXeroContact(t, got[0].body).Contacts[0]
	if c.ContactID != "" || c.Name != `Acme "Fresh" Supplies` || c.ContactNumber != "SUP-001" || c.EmailAddress != "orders@acme.example" ||
		c.TaxNumber != "GB123456789" || c.DefaultCurrency != "GBP" {
		t.Errorf("created contact = %s", got[0].body)
	}
	wantAddress := map[string]string{"AddressType": "POBOX", "AddressLine1": "Unit 4", "AddressLine2": "12 Dock Road",
		"City": "Leeds", "PostalCode": "LS1 4AB", "Country": "United Kingdom"}
	if len(c.Addresses) != 1 || !equalMaps(c.Addresses[0], wantAddress) {
		t.Errorf("addresses = %v, want [%v]", c.Addresses, wantAddress)
	}
	if len(c.Phones) != 1 || !equalMaps(c.Phones[0], map[string]string{"PhoneType": "DEFAULT", "PhoneNumber": "+44 113 496 0000"}) {
		t.Errorf("phones = %v", c.Phones)
	}
	// The update sends what the host gave: the name and code, no empty fields.
	if string(got[1].body) != `{"Contacts":[{"ContactID":"`+testXeroContactID+`","Name":"Acme Fresh Supplies Ltd","ContactNumber":"SUP-001"}]}` {
		t.Errorf("update body = %s", got[1].body)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestXeroDuplicateNameLinksToTheExistingContact: Xero refuses a new
// contact whose name another has, in a 200 (summarizeErrors=false) or a
// 400; the push then finds that contact, by ContactNumber first when the
// supplier has a code, by name otherwise or when the code finds none, and
// links to it.
func TestXeroDuplicateNameLinksToTheExistingContact(t *testing.T) {
	t.Parallel()
	noCode := testSupplier()
	noCode.Code = ""
	tests := []struct {
		name     string
		supplier Supplier
		replies  []reply
		wheres   []string
		want     string
	}{
		{"200, found by ContactNumber", testSupplier(),
			[]reply{{status: 200, file: "xero/contact_duplicate_200.json"}, {status: 200, file: "xero/contacts_found_by_number.json"}},
			[]string{`ContactNumber=="SUP-001"`}, testXeroNumberedID},
		{"400, found by ContactNumber", testSupplier(),
			[]reply{{status: 400, file: "xero/contact_duplicate_400.json"}, {status: 200, file: "xero/contacts_found_by_number.json"}},
			[]string{`ContactNumber=="SUP-001"`}, testXeroNumberedID},
		{"no contact with the code, found by name", testSupplier(),
			[]reply{{status: 200, file: "xero/contact_duplicate_200.json"}, {status: 200, file: "xero/contacts_none.json"},
				{status: 200, file: "xero/contacts_found.json"}},
			[]string{`ContactNumber=="SUP-001"`, `Name=="Acme ""Fresh"" Supplies"`}, testXeroNamedID},
		{"no code, found by name", noCode,
			[]reply{{status: 200, file: "xero/contact_duplicate_200.json"}, {status: 200, file: "xero/contacts_found.json"}},
			[]string{`Name=="Acme ""Fresh"" Supplies"`}, testXeroNamedID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, tt.replies...)
			x := newTestXero(t)
			res, err := x.PushSupplier(context.Background(), xeroConn(api, ""), accountingCred(), supplierCommand(tt.supplier))
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != StatusCompleted || res.Action != SupplierLinked || res.ExternalID != tt.want ||
				res.Document == nil || *res.Document != (Document{ID: tt.want}) {
				t.Errorf("result = %+v, want linked to %s", res, tt.want)
			}
			got := api.requests()
			if len(got) != 1+len(tt.wheres) {
				t.Fatalf("%d requests, want %d", len(got), 1+len(tt.wheres))
			}
			for i, where := range tt.wheres {
				r := got[1+i]
				if r.method != http.MethodGet || r.path != "/api.xro/2.0/Contacts" || r.query.Get("where") != where ||
					r.header.Get("xero-tenant-id") != "tenant-7" || r.header.Get("Authorization") != "Bearer "+testToken || len(r.body) != 0 {
					t.Errorf("lookup %d: %s %s where %q, want %q", i, r.method, r.path, r.query.Get("where"), where)
				}
			}
		})
	}
}

// TestXeroDuplicateNameRefusals: a duplicate name that finds no contact,
// a rename onto another contact's name, and any other validation error are
// permanent refusals that say what happened; only the first looks anything up.
func TestXeroDuplicateNameRefusals(t *testing.T) {
	t.Parallel()
	x := newTestXero(t)

	api := newFakeAPI(t, reply{status: 200, file: "xero/contact_duplicate_200.json"}, reply{status: 200, file: "xero/contacts_none.json"},
		reply{status: 200, file: "xero/contacts_none.json"})
	_, err := x.PushSupplier(context.Background(), xeroConn(api, ""), accountingCred(), supplierCommand(testSupplier()))
	if e := asError(t, err); e.Kind != Rejected || !strings.Contains(e.Message, "no active contact of that name or ContactNumber SUP-001 was found") {
		t.Errorf("nothing to link = %v", err)
	}
	if n := len(api.requests()); n != 3 {
		t.Errorf("%d requests, want the push and two lookups", n)
	}

	api = newFakeAPI(t, reply{status: 200, file: "xero/contact_duplicate_200.json"})
	cmd := supplierCommand(testSupplier())
	cmd.Document = &Document{ID: testXeroContactID}
	_, err = x.PushSupplier(context.Background(), xeroConn(api, ""), accountingCred(), cmd)
	if e := asError(t, err); e.Kind != Rejected || !strings.Contains(e.Message, "refused to rename contact "+testXeroContactID) {
		t.Errorf("rename onto another's name = %v", err)
	}

	api = newFakeAPI(t, reply{status: 200, file: "xero/contact_invalid_200.json"})
	_, err = x.PushSupplier(context.Background(), xeroConn(api, ""), accountingCred(), supplierCommand(testSupplier()))
	if e := asError(t, err); e.Kind != Rejected || !strings.Contains(e.Message, "xero refused the contact: Email address must be valid") {
		t.Errorf("other validation error = %v", err)
	}
	if n := len(api.requests()); n != 1 {
		t.Errorf("%d requests after a validation error, want 1", n)
	}
}

// TestXeroSupplierFailuresAreClassifiedAsThePurchaseOrders: the contact
// calls, the lookup included, share the purchase order's classification:
// rate limits pause the connection, 401 asks for a fresh token.
func TestXeroSupplierFailuresAreClassifiedAsThePurchaseOrders(t *testing.T) {
	t.Parallel()
	x := newTestXero(t)
	api := newFakeAPI(t, reply{status: 429, file: "xero/rate_limited_429.json",
		header: map[string]string{"Retry-After": "50400", "X-Rate-Limit-Problem": "day"}})
	_, err := x.PushSupplier(context.Background(), xeroConn(api, ""), accountingCred(), supplierCommand(testSupplier()))
	if e := asError(t, err); e.Kind != Retryable || !e.PauseConnection || !e.DailyLimit || e.RetryAfter != 14*time.Hour {
		t.Errorf("day limit = %+v", e)
	}

	api = newFakeAPI(t, reply{status: 400, file: "xero/contact_duplicate_400.json"},
		reply{status: 429, file: "xero/rate_limited_429.json", header: map[string]string{"Retry-After": "20", "X-Rate-Limit-Problem": "minute"}})
	_, err = x.PushSupplier(context.Background(), xeroConn(api, ""), accountingCred(), supplierCommand(testSupplier()))
	if e := asError(t, err); e.Kind != Retryable || !e.PauseConnection || e.RetryAfter != 20*time.Second ||
		!strings.Contains(e.Message, "finding the contact") {
		t.Errorf("lookup rate limited = %+v", e)
	}

	api = newFakeAPI(t, reply{status: 401, file: "xero/unauthorized_401.json"})
	_, err = x.PushSupplier(context.Background(), xeroConn(api, ""), accountingCred(), supplierCommand(testSupplier()))
	if e := asError(t, err); e.Kind != Rejected || !e.AuthFailed || strings.Contains(e.Error(), testToken) {
		t.Errorf("401 = %+v", e)
	}
}

func TestXeroWhereEquals(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"Acme":                 `Name=="Acme"`,
		`Acme "Fresh"`:         `Name=="Acme ""Fresh"""`,
		`O'Brien & Sons \ Co.`: `Name=="O'Brien & Sons \ Co."`,
	} {
		if got := xeroWhereEquals("Name", in); got != want {
			t.Errorf("xeroWhereEquals(%q) = %s, want %s", in, got, want)
		}
	}
}
