package testenv

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/testenv/explain"
)

// CheckPlanUses fails t unless the plan of sql (with args) on f's database
// names index; what says which statement it is. On failure it prints the
// plan's outline: its node types, relations and index names, in order.
func (f *Fixture) CheckPlanUses(t testing.TB, index, what, sql string, args ...any) {
	t.Helper()
	f.checkPlanUses(t, false, index, what, sql, args...)
}

// CheckGenericPlanUses is CheckPlanUses for the generic plan of sql, the
// one a routine set to plan_cache_mode = force_generic_plan keeps.
func (f *Fixture) CheckGenericPlanUses(t testing.TB, index, what, sql string, args ...any) {
	t.Helper()
	f.checkPlanUses(t, true, index, what, sql, args...)
}

func (f *Fixture) checkPlanUses(t testing.TB, generic bool, index, what, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	var plan string
	if !generic {
		if err := f.Pool.QueryRow(ctx, "explain (format json) "+sql, args...).Scan(&plan); err != nil {
			t.Fatal(err)
		}
	} else {
		named, ok := singleNamedArgs(args)
		if !ok {
			t.Fatalf("the generic plan of %s: the check takes one pgx.NamedArgs", what)
		}
		tx, err := f.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "set local plan_cache_mode = force_generic_plan"); err != nil {
			t.Fatal(err)
		}
		if plan, err = explain.Prepared(ctx, tx, sql, named, "format json"); err != nil {
			t.Fatalf("the generic plan of %s: %v", what, err)
		}
		// A generic plan keeps the parameters where a custom one has values.
		if len(named) > 0 && !regexp.MustCompile(`\$[0-9]+`).MatchString(plan) {
			t.Fatalf("the plan of %s names no parameter: not a generic plan", what)
		}
	}
	if !strings.Contains(plan, fmt.Sprintf("%q", index)) {
		kind := "plan"
		if generic {
			kind = "generic plan"
		}
		t.Errorf("the %s of %s does not use %s: %s", kind, what, index, planOutline(plan))
	}
}

// singleNamedArgs reports whether args is one pgx.NamedArgs.
func singleNamedArgs(args []any) (pgx.NamedArgs, bool) {
	if len(args) != 1 {
		return nil, false
	}
	named, ok := args[0].(pgx.NamedArgs)
	return named, ok
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
