// Package explain explains a statement's plan as a prepared statement runs
// it, for the tests of the packages that check plans: internal/testenv and
// the in-package tests of internal/outbox, which testenv imports (so this
// package imports neither).
package explain

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// seq names each prepared statement apart, so that one a failed explain
// left on a pooled connection never meets the next.
var seq atomic.Int64

// Prepared prepares sql with args in tx and explains its execution with
// options (its lines joined): the plan the prepared statement runs, the
// generic one under plan_cache_mode = force_generic_plan. (EXPLAIN of the
// statement itself, its parameters bound, plans it with their values
// whatever plan_cache_mode says.)
func Prepared(ctx context.Context, tx pgx.Tx, sql string, args pgx.NamedArgs, options string) (string, error) {
	sql, values, err := args.RewriteQuery(ctx, tx.Conn(), sql, nil)
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("explained_%d", seq.Add(1))
	if _, err := tx.Exec(ctx, "prepare "+name+" as "+sql); err != nil {
		return "", fmt.Errorf("preparing the statement: %w", err)
	}
	defer tx.Exec(context.WithoutCancel(ctx), "deallocate "+name)
	params := make([]string, len(values))
	for i := range values {
		params[i] = fmt.Sprintf("$%d", i+1)
	}
	rows, err := tx.Query(ctx, "explain ("+options+") execute "+name+"("+strings.Join(params, ", ")+")",
		append([]any{pgx.QueryExecModeSimpleProtocol}, values...)...)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return strings.Join(lines, "\n"), err
}
