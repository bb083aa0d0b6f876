package outbox

import "testing"

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

func TestCamelKeysKeepsValues(t *testing.T) {
	got, err := camelKeys([]byte(`{"order_number":"PO-1","location_id":null,"items":[{"unitCode":"case"}],"total_minor":1999}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"items":[{"unitCode":"case"}],"locationId":null,"orderNumber":"PO-1","totalMinor":1999}`
	if string(got) != want {
		t.Errorf("camelKeys = %s, want %s", got, want)
	}
	if _, err := camelKeys([]byte(`[1]`)); err == nil {
		t.Error("a non-object must be an error")
	}
}
