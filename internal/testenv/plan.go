package testenv

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
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
		// EXPLAIN of a statement with parameters plans it with their values
		// (a custom plan) whatever plan_cache_mode says: the generic plan is
		// the one a prepared statement keeps, explained at its execution.
		conn, err := f.Pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		if named, ok := singleNamedArgs(args); ok {
			if sql, args, err = named.RewriteQuery(ctx, conn.Conn(), sql, nil); err != nil {
				t.Fatal(err)
			}
		}
		// A prepared statement outlives the transaction: deallocated after
		// its rollback (deferred first, run last), whatever failed.
		defer conn.Exec(context.WithoutCancel(ctx), "deallocate generic_plan_checked")
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "set local plan_cache_mode = force_generic_plan"); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "prepare generic_plan_checked as "+sql); err != nil {
			t.Fatalf("preparing %s: %v", what, err)
		}
		params := make([]string, len(args))
		for i := range args {
			params[i] = fmt.Sprintf("$%d", i+1)
		}
		if err := tx.QueryRow(ctx, "explain (format json) execute generic_plan_checked("+strings.Join(params, ", ")+")",
			append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...).Scan(&plan); err != nil {
			t.Fatal(err)
		}
		// A generic plan keeps the parameters where a custom one has values.
		if len(args) > 0 && !regexp.MustCompile(`\$[0-9]+`).MatchString(plan) {
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
