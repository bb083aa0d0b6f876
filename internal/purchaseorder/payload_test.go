package purchaseorder

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzExternalSupplierID: payload_json is written by the host application;
// its seeds run as ordinary tests, `go test -fuzz` explores.
func FuzzExternalSupplierID(f *testing.F) {
	for _, seed := range []string{
		``, `null`, `{}`, `[]`, `"SUP-1"`, `1`, `{"externalSupplierId":"SUP-1"}`, `{"externalSupplierId":null}`,
		`{"externalSupplierId":42}`, `{"externalSupplierId":["SUP-1"]}`, `{"externalSupplierId":{"id":1}}`,
		`{"externalSupplierId":""}`, `{"externalSupplierId":" \t"}`, `{"ExternalSupplierId":"SUP-1"}`,
		`{"externalSupplierId":"a","externalSupplierId":"b"}`, `{"externalSupplierId":"\u0000"}`,
		`{"externalSupplierId":"'; drop table external_integration_outbox; --"}`, `{"externalSupplierId":"\ud800"}`,
		`{"externalSupplierId":"SUP-1","other":{"deep":[1,2,3]}}`, `{"externalSupplierId":"SUP-1"`,
	} {
		f.Add([]byte(seed))
	}
	known := map[string]bool{
		"payload_json: must be a JSON object":                true,
		"payload_json.externalSupplierId: is required":       true,
		"payload_json.externalSupplierId: must be a string":  true,
		"payload_json.externalSupplierId: must not be empty": true,
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		id, err := externalSupplierID(raw)
		if err != nil {
			// The errors are fixed texts: nothing of the payload is echoed.
			if !known[err.Error()] || id != "" {
				t.Fatalf("externalSupplierID(%q) = %q, %v", raw, id, err)
			}
			return
		}
		var obj map[string]any
		if json.Unmarshal(raw, &obj) != nil {
			t.Fatalf("externalSupplierID accepted %q, which is not a JSON object", raw)
		}
		if got, ok := obj["externalSupplierId"].(string); !ok || got != id || strings.TrimSpace(id) == "" {
			t.Fatalf("externalSupplierID(%q) = %q, want the non-blank string externalSupplierId", raw, id)
		}
	})
}
