package qboschema

import (
	"errors"
	"strings"
	"testing"
)

// A purchase order as the quickbooks provider builds it, and a vendor.
const (
	validOrder = `{"VendorRef":{"value":"41"},"APAccountRef":{"value":"33","name":"Accounts Payable (A/P)"},
		"DocNumber":"PO-1","CurrencyRef":{"value":"USD"},"TxnDate":"2026-12-05","GlobalTaxCalculation":"TaxExcluded",
		"Line":[{"DetailType":"ItemBasedExpenseLineDetail","Amount":25.5,"Description":"Bolts",
			"ItemBasedExpenseLineDetail":{"ItemRef":{"value":"7"},"Qty":3,"UnitPrice":8.5}},
			{"DetailType":"AccountBasedExpenseLineDetail","Amount":10,"AccountBasedExpenseLineDetail":{"AccountRef":{"value":"80"}}}]}`
	validVendor = `{"DisplayName":"Acme Ltd","CompanyName":"Acme Ltd","PrimaryEmailAddr":{"Address":"ap@acme.example"},
		"PrimaryPhone":{"FreeFormNumber":"+44 20 7946 0000"},"BillAddr":{"Line1":"1 Road","City":"London","PostalCode":"E1","Country":"GB"},
		"TaxIdentifier":"GB123","CurrencyRef":{"value":"GBP"},"AcctNum":"SUP-1"}`
	sparseVendor = `{"Id":"58","SyncToken":"2","sparse":true,"DisplayName":"Acme Ltd"}`
)

func TestTheModelNamesItsSource(t *testing.T) {
	m, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if m.Source.Repository != "intuit/QuickBooks-V3-Java-SDK" || len(m.Source.Commit) != 40 {
		t.Errorf("source %+v", m.Source)
	}
	// The base chain the JSON API flattens, from the XSD.
	for typ, base := range map[string]string{"PurchaseOrder": "PurchaseByVendor", "PurchaseByVendor": "Transaction",
		"Transaction": "IntuitEntity", "Vendor": "NameBase"} {
		if got := m.Types[typ]; got == nil || got.Base != base {
			t.Errorf("%s extends %+v, want %s", typ, got, base)
		}
	}
}

func TestValidBodiesPass(t *testing.T) {
	for root, body := range map[string]string{"PurchaseOrder": validOrder, "Vendor": validVendor} {
		if err := Validate(root, []byte(body)); err != nil {
			t.Errorf("%s: %v", root, err)
		}
	}
	if err := Validate("Vendor", []byte(sparseVendor)); err != nil {
		t.Errorf("sparse update: %v", err)
	}
}

// TestEachRuleRefuses: each body breaks one rule at some depth, and the
// violation names the place.
func TestEachRuleRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, root, body, path, want string
	}{
		{"unknown key at the top", "PurchaseOrder", strings.Replace(validOrder, `"DocNumber"`, `"DocNum"`, 1), "PurchaseOrder.DocNum", "has no DocNum"},
		{"unknown key in a line detail", "PurchaseOrder", strings.Replace(validOrder, `"UnitPrice":8.5`, `"UnitPrice":8.5,"Sku":"B-1"`, 1),
			"PurchaseOrder.Line[0].ItemBasedExpenseLineDetail.Sku", "has no Sku"},
		{"unknown key in a reference", "PurchaseOrder", strings.Replace(validOrder, `{"value":"41"}`, `{"value":"41","id":"41"}`, 1),
			"PurchaseOrder.VendorRef.id", "has no id"},
		{"a number as a string", "PurchaseOrder", strings.Replace(validOrder, `"Amount":25.5`, `"Amount":"25.5"`, 1),
			"PurchaseOrder.Line[0].Amount", "JSON number"},
		{"a string as a number", "PurchaseOrder", strings.Replace(validOrder, `"DocNumber":"PO-1"`, `"DocNumber":1`, 1),
			"PurchaseOrder.DocNumber", "JSON string"},
		{"a boolean as a string", "Vendor", strings.Replace(sparseVendor, `"sparse":true`, `"sparse":"true"`, 1), "Vendor.sparse", "JSON boolean"},
		{"a date that is not one", "PurchaseOrder", strings.Replace(validOrder, `"2026-12-05"`, `"05/12/2026"`, 1), "PurchaseOrder.TxnDate", "date"},
		{"an enumeration value outside the list", "PurchaseOrder", strings.Replace(validOrder, `"DetailType":"AccountBasedExpenseLineDetail"`, `"DetailType":"AccountLine"`, 1),
			"PurchaseOrder.Line[1].DetailType", "LineDetailTypeEnum"},
		{"GlobalTaxCalculation outside its list", "PurchaseOrder", strings.Replace(validOrder, `"TaxExcluded"`, `"Excluded"`, 1),
			"PurchaseOrder.GlobalTaxCalculation", "GlobalTaxCalculationEnum"},
		{"an array where one is allowed", "PurchaseOrder", strings.Replace(validOrder, `"VendorRef":{"value":"41"}`, `"VendorRef":[{"value":"41"}]`, 1),
			"PurchaseOrder.VendorRef", "at most once"},
		{"one where an array is", "PurchaseOrder", strings.Replace(validOrder, `"Line":[`, `"Line":`, 1)[:0] +
			`{"VendorRef":{"value":"41"},"Line":{"DetailType":"AccountBasedExpenseLineDetail","Amount":1}}`, "PurchaseOrder.Line", "an array"},
		{"a string where an object is", "Vendor", strings.Replace(validVendor, `{"Address":"ap@acme.example"}`, `"ap@acme.example"`, 1),
			"Vendor.PrimaryEmailAddr", "JSON object"},
	} {
		err := Validate(tc.root, []byte(tc.body))
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%s: %v, want a violation", tc.name, err)
			continue
		}
		found := false
		for _, v := range e.Violations {
			if v.Path == tc.path && strings.Contains(v.Message, tc.want) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: %v, want %s: …%s…", tc.name, err, tc.path, tc.want)
		}
	}
}
