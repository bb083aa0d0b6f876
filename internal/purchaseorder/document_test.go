package purchaseorder

import (
	"encoding/json"
	"testing"
)

func TestCamel(t *testing.T) {
	for in, want := range map[string]string{
		"id": "id", "organization_id": "organizationId", "units_per_purchase_unit_snapshot": "unitsPerPurchaseUnitSnapshot",
		"items": "items", "_private": "private", "a__b": "aB", "x2_y": "x2Y", "": "",
	} {
		if got := camel(in); got != want {
			t.Errorf("camel(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPurchaseOrderDocument(t *testing.T) {
	got, err := purchaseOrderDocument(
		[]byte(`{"order_number": "PO-1", "location_id": null, "total_minor": 1999, "items": "a column named items"}`),
		[]byte(`[{"unitCode": "case"}]`))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"items":[{"unitCode": "case"}],"locationId":null,"orderNumber":"PO-1","totalMinor":1999}`
	if string(got) != want {
		t.Errorf("document = %s\nwant       %s", got, want)
	}
	if !json.Valid(got) {
		t.Error("document is not valid JSON")
	}
	if _, err := purchaseOrderDocument([]byte(`[1]`), []byte(`[]`)); err == nil {
		t.Error("a non-object row must be an error")
	}
}
