package purchaseorder

import (
	"encoding/json"
	"errors"
	"strings"
)

// externalSupplierID reads payload_json.externalSupplierId, which the host
// application writes. Its key is matched exactly; other keys are the host's
// business and ignored.
func externalSupplierID(payload json.RawMessage) (string, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(payload, &obj); err != nil || obj == nil {
		return "", errors.New("payload_json: must be a JSON object")
	}
	raw, ok := obj["externalSupplierId"]
	if !ok || string(raw) == "null" {
		return "", errors.New("payload_json.externalSupplierId: is required")
	}
	var id string
	if err := json.Unmarshal(raw, &id); err != nil {
		return "", errors.New("payload_json.externalSupplierId: must be a string")
	}
	if strings.TrimSpace(id) == "" {
		return "", errors.New("payload_json.externalSupplierId: must not be empty")
	}
	return id, nil
}
