package outbox

import (
	"encoding/json"
	"fmt"
	"strings"
)

// camelKeys renames the top-level keys of a JSON object from the database's
// snake_case to camelCase (organization_id → organizationId). Values are
// kept byte for byte. It runs in the worker rather than in SQL: per column
// string work in the start statement cost more database time than the rest
// of the statement together (bench/results.md).
func camelKeys(obj []byte) (json.RawMessage, error) {
	var cols map[string]json.RawMessage
	if err := json.Unmarshal(obj, &cols); err != nil {
		return nil, fmt.Errorf("decoding purchase order row: %w", err)
	}
	out := make(map[string]json.RawMessage, len(cols))
	for k, v := range cols {
		out[camel(k)] = v
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encoding purchase order: %w", err)
	}
	return b, nil
}

// camel turns snake_case into camelCase.
func camel(name string) string {
	parts := strings.Split(name, "_")
	var b strings.Builder
	b.Grow(len(name))
	for i, p := range parts {
		if p == "" {
			continue
		}
		if i == 0 || b.Len() == 0 {
			b.WriteString(p)
			continue
		}
		b.WriteString(strings.ToUpper(p[:1]))
		b.WriteString(p[1:])
	}
	return b.String()
}
