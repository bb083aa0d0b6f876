package purchaseorder

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// purchaseOrderDocument builds the webhook's purchaseOrder object from the
// order row (to_jsonb, snake_case columns) and its lines (already in their
// wire shape, docs/receivers.md): the columns in camelCase plus "items". Values are copied
// byte for byte: PostgreSQL produced them, and re-validating them cost more
// than the rest of the worker (bench/results.md). The renaming runs here, not
// in SQL, where string work per column dominated the start statement.
func purchaseOrderDocument(row, items []byte) (json.RawMessage, error) {
	var cols map[string]json.RawMessage
	if err := json.Unmarshal(row, &cols); err != nil {
		return nil, fmt.Errorf("decoding purchase order row: %w", err)
	}
	keys := make([]string, 0, len(cols)+1)
	byKey := make(map[string]json.RawMessage, len(cols)+1)
	for k, v := range cols {
		ck := camel(k)
		keys = append(keys, ck)
		byKey[ck] = v
	}
	if _, ok := byKey["items"]; !ok {
		keys = append(keys, "items")
	}
	byKey["items"] = items
	slices.Sort(keys)
	var b bytes.Buffer
	b.Grow(len(row) + len(items) + 16)
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		name, err := json.Marshal(k)
		if err != nil {
			return nil, fmt.Errorf("encoding purchase order key: %w", err)
		}
		b.Write(name)
		b.WriteByte(':')
		b.Write(byKey[k])
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// camel turns snake_case into camelCase.
func camel(name string) string {
	parts := strings.Split(name, "_")
	var b strings.Builder
	b.Grow(len(name))
	for _, p := range parts {
		if p == "" {
			continue
		}
		if b.Len() == 0 {
			b.WriteString(p)
			continue
		}
		b.WriteString(strings.ToUpper(p[:1]))
		b.WriteString(p[1:])
	}
	return b.String()
}
