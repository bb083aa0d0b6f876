package purchaseorder

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzSupplierRef: payload_json is written by the host application; its
// seeds run as ordinary tests, `go test -fuzz` explores.
func FuzzSupplierRef(f *testing.F) {
	for _, seed := range []string{
		``, `null`, `{}`, `[]`, `"SUP-1"`, `1`, `{"externalSupplierId":"SUP-1"}`, `{"externalSupplierId":null}`,
		`{"externalSupplierId":42}`, `{"externalSupplierId":["SUP-1"]}`, `{"externalSupplierId":{"id":1}}`,
		`{"externalSupplierId":""}`, `{"externalSupplierId":" \t"}`, `{"ExternalSupplierId":"SUP-1"}`,
		`{"externalSupplierId":"a","externalSupplierId":"b"}`, `{"externalSupplierId":"\u0000"}`,
		`{"externalSupplierId":"'; drop table external_integration_outbox; --"}`, `{"externalSupplierId":"\ud800"}`,
		`{"externalSupplierId":"SUP-1","other":{"deep":[1,2,3]}}`, `{"externalSupplierId":"SUP-1"`,
		`{"supplierId":"0b8f6a3e-0000-4000-8000-000000000001"}`, `{"supplierId":7}`, `{"supplierId":""}`,
		`{"externalSupplierId":null,"supplierId":"S"}`, `{"externalSupplierId":"X","supplierId":1}`,
	} {
		f.Add([]byte(seed))
	}
	known := map[string]bool{
		"payload_json: must be a JSON object":                true,
		"payload_json.externalSupplierId: must be a string":  true,
		"payload_json.externalSupplierId: must not be empty": true,
		"payload_json.supplierId: must be a string":          true,
		"payload_json.supplierId: must not be empty":         true,
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		ref, err := readSupplierRef(raw)
		if err != nil {
			// The errors are fixed texts: nothing of the payload is echoed.
			if !known[err.Error()] || ref != (supplierRef{}) {
				t.Fatalf("readSupplierRef(%q) = %+v, %v", raw, ref, err)
			}
			return
		}
		var obj map[string]any
		if json.Unmarshal(raw, &obj) != nil {
			t.Fatalf("readSupplierRef accepted %q, which is not a JSON object", raw)
		}
		external, _ := obj["externalSupplierId"].(string)
		host, _ := obj["supplierId"].(string)
		switch {
		case ref.External != "":
			if external != ref.External || strings.TrimSpace(external) == "" || ref.HostID != "" {
				t.Fatalf("readSupplierRef(%q) = %+v, want the non-blank string externalSupplierId alone", raw, ref)
			}
		case ref.HostID != "":
			if obj["externalSupplierId"] != nil || host != ref.HostID || strings.TrimSpace(host) == "" {
				t.Fatalf("readSupplierRef(%q) = %+v, want the non-blank string supplierId", raw, ref)
			}
		case obj["externalSupplierId"] != nil || obj["supplierId"] != nil:
			t.Fatalf("readSupplierRef(%q) = %+v, but the payload names a supplier", raw, ref)
		}
	})
}
