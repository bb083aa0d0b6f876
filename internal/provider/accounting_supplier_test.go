package provider

import (
	"context"
	"strings"
	"testing"

	"integration-outbox/internal/credential"
)

// TestSuppliersRefusedBeforeAnyCall: what a provider can never take is
// refused permanently, naming the field, and CheckSupplier says the same
// without calling: Xero's and QuickBooks' limits, a remembered record the
// provider cannot update, no access token. A good push checks clean.
func TestSuppliersRefusedBeforeAnyCall(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	sup := func(f func(*Supplier)) func(*SupplierPush) { return func(c *SupplierPush) { f(&c.Supplier) } }
	same := func(*SupplierPush) {}
	doc58 := func(c *SupplierPush) { c.Document = &Document{ID: "58"} }
	type refusal struct {
		name string
		cred credential.Credential
		edit func(*SupplierPush)
		kind ErrorKind
		says string
	}
	for _, p := range []struct {
		provider interface {
			SupplierPusher
			SupplierChecker
		}
		conn     Connection
		supplier Supplier
		cases    []refusal
	}{
		{newTestXero(t), xeroConn(api, ""), testSupplier(), []refusal{
			{"long name", accountingCred(), sup(func(s *Supplier) { s.Name = strings.Repeat("é", 256) }), PayloadInvalid,
				"payload_json.name: 256 characters; Xero's contact Name takes at most 255"},
			{"long code", accountingCred(), sup(func(s *Supplier) { s.Code = strings.Repeat("9", 51) }), PayloadInvalid, "payload_json.code"},
			{"long country", accountingCred(), sup(func(s *Supplier) { s.Country = strings.Repeat("x", 51) }), PayloadInvalid, "payload_json.country"},
			{"unknown currency", accountingCred(), sup(func(s *Supplier) { s.CurrencyCode = "ZZZ" }), PayloadInvalid, `payload_json.currencyCode: "ZZZ"`},
			{"five address lines", accountingCred(), sup(func(s *Supplier) { s.AddressLines = []string{"1", "2", "3", "4", "5"} }), PayloadInvalid, "addressLines"},
			{"no name", accountingCred(), sup(func(s *Supplier) { s.Name = "" }), PayloadInvalid, "payload_json.name"},
			{"document not a GUID", accountingCred(), doc58, PayloadInvalid, "not a Xero ContactID"},
			{"no token", credential.Credential{}, same, ConfigInvalid, "no access token"},
		}},
		{newTestQuickBooks(t), quickBooksConn(api), qboSupplier(), []refusal{
			{"long tax number", accountingCred(), sup(func(s *Supplier) { s.TaxNumber = strings.Repeat("1", 21) }), PayloadInvalid,
				"payload_json.taxNumber: 21 characters; QuickBooks' vendor TaxIdentifier takes at most 20"},
			{"long phone", accountingCred(), sup(func(s *Supplier) { s.Phone = strings.Repeat("1", 31) }), PayloadInvalid, "payload_json.phone"},
			{"long email", accountingCred(), sup(func(s *Supplier) { s.Email = strings.Repeat("a", 95) + "@x.example" }), PayloadInvalid, "payload_json.email"},
			{"unknown currency", accountingCred(), sup(func(s *Supplier) { s.CurrencyCode = "XXX" }), PayloadInvalid, "payload_json.currencyCode"},
			{"document without SyncToken", accountingCred(), doc58, PayloadInvalid, "no SyncToken"},
			{"no token", credential.Credential{}, same, ConfigInvalid, "no access token"},
		}},
	} {
		for _, tt := range p.cases {
			cmd := supplierCommand(p.supplier)
			tt.edit(&cmd)
			_, err := p.provider.PushSupplier(context.Background(), p.conn, tt.cred, cmd)
			if e := asError(t, err); e.Kind != tt.kind || !strings.Contains(e.Message, tt.says) {
				t.Errorf("%s %s: %v, want %v saying %q", p.provider.Name(), tt.name, err, tt.kind, tt.says)
			}
			if cerr := p.provider.CheckSupplier(p.conn, tt.cred, cmd); cerr == nil || cerr.Error() != err.Error() {
				t.Errorf("%s %s: CheckSupplier = %v, want %v", p.provider.Name(), tt.name, cerr, err)
			}
		}
		if err := p.provider.CheckSupplier(p.conn, accountingCred(), supplierCommand(p.supplier)); err != nil {
			t.Errorf("%s: CheckSupplier of a good push = %v", p.provider.Name(), err)
		}
	}
	if n := len(api.requests()); n != 0 {
		t.Errorf("%d calls made, want none", n)
	}
}

// TestQuickBooksLongNameIsDisplayNameOnly: a name too long for
// CompanyName is sent as DisplayName only.
func TestQuickBooksLongNameIsDisplayNameOnly(t *testing.T) {
	t.Parallel()
	long := qboSupplier()
	long.Name = strings.Repeat("n", 101)
	body, err := quickBooksVendorBody(long, nil)
	if err != nil {
		t.Fatal(err)
	}
	validQBO(t, "Vendor", body)
	if v := decodeQBOVendor(t, body); v.CompanyName != "" || v.DisplayName != long.Name {
		t.Errorf("101-character name: %s", body)
	}
}
