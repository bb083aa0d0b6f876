package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// CheckPlanUses fails t unless the plan of sql (with args) on f's database
// names index; what says which statement it is. On failure it prints the
// plan's outline: its node types, relations and index names, in order.
func (f *Fixture) CheckPlanUses(t testing.TB, index, what, sql string, args ...any) {
	t.Helper()
	var plan string
	if err := f.Pool.QueryRow(context.Background(), "explain (format json) "+sql, args...).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, fmt.Sprintf("%q", index)) {
		t.Errorf("the plan of %s does not use %s: %s", what, index, planOutline(plan))
	}
}

// planOutline is a plan's node types, relations and index names, in order.
func planOutline(plan string) string {
	var out []string
	for line := range strings.SplitSeq(plan, "\n") {
		line = strings.TrimSpace(line)
		for _, key := range []string{`"Node Type"`, `"Relation Name"`, `"Index Name"`} {
			if strings.HasPrefix(line, key) {
				out = append(out, strings.Trim(strings.TrimPrefix(line, key+": "), `",`))
			}
		}
	}
	return strings.Join(out, " / ")
}
