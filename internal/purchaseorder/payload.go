package purchaseorder

import (
	"encoding/json"
	"errors"
	"strings"
)

// supplierRef is whom an order's payload_json says the order goes to: the
// provider's id of the supplier (externalSupplierId), or else the host's
// supplier (supplierId), whose contact an earlier push_supplier created.
// Both empty: the order's own supplier_id names the host's supplier.
type supplierRef struct {
	External string
	HostID   string
}

// readSupplierRef reads payload_json.externalSupplierId and
// payload_json.supplierId, which the host application writes. Their keys
// are matched exactly; other keys are the host's business and ignored.
func readSupplierRef(payload json.RawMessage) (supplierRef, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(payload, &obj); err != nil || obj == nil {
		return supplierRef{}, errors.New("payload_json: must be a JSON object")
	}
	var ref supplierRef
	var err error
	if ref.External, err = optionalID(obj, "externalSupplierId"); err != nil {
		return supplierRef{}, err
	}
	if ref.External != "" {
		return ref, nil
	}
	if ref.HostID, err = optionalID(obj, "supplierId"); err != nil {
		return supplierRef{}, err
	}
	return ref, nil
}

// optionalID reads obj[key]: absent and null are empty; anything else must
// be a non-blank string.
func optionalID(obj map[string]json.RawMessage, key string) (string, error) {
	raw, ok := obj[key]
	if !ok || string(raw) == "null" {
		return "", nil
	}
	var id string
	if err := json.Unmarshal(raw, &id); err != nil {
		return "", errors.New("payload_json." + key + ": must be a string")
	}
	if strings.TrimSpace(id) == "" {
		return "", errors.New("payload_json." + key + ": must not be empty")
	}
	return id, nil
}
