// Package schemacheck proves the installed database against what the
// functions run: the host's tables against internal/hostschema's
// declaration, and every statement of every package (each embedded SQL
// file, every mode of the claim, the record, reruns, credentials, health,
// pace, events, inspection, reports, retention) parsed, analysed and planned
// by PostgreSQL, and the enqueue function run once; all in one transaction
// that is rolled back, so it changes nothing. make migrate runs it after
// installing (infra/migrate), operators after changing the host's tables
// (outboxctl check). It also says which statements' routines are missing
// or out of date (internal/sqlroutine): not an error of the schema (the
// statements then run plain), but a cost the operator should know about.
package schemacheck

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/document"
	"integration-outbox/internal/event"
	"integration-outbox/internal/health"
	"integration-outbox/internal/hostschema"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/pace"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/report"
	"integration-outbox/internal/rerun"
	"integration-outbox/internal/retention"
	"integration-outbox/internal/routines"
	"integration-outbox/internal/sqlfile"
	"integration-outbox/internal/sqlroutine"
	"integration-outbox/internal/supplier"
)

// Statements are every statement the functions run, by package.
func Statements() []sqlfile.Named {
	var all []sqlfile.Named
	for _, pkg := range [][]sqlfile.Named{
		outbox.Statements(), purchaseorder.Statements(), supplier.Statements(), document.Statements(), credential.Statements(), health.Statements(),
		pace.Statements(), event.Statements(), report.Statements(), rerun.Statements(), retention.Statements(),
	} {
		all = append(all, pkg...)
	}
	return all
}

// Failure is a statement PostgreSQL refused.
type Failure struct {
	Statement string
	Err       error
}

func (f Failure) String() string { return f.Statement + ": " + f.Err.Error() }

// Report is what Run found.
type Report struct {
	// Tables: what the host's tables lack or hold that the worker cannot
	// work with.
	Tables hostschema.Problems
	// Failures: the statements that do not prepare or plan, with
	// PostgreSQL's error.
	Failures []Failure
	// Checked is how many statements were prepared and planned.
	Checked int
	// Routines: the statements whose routine (internal/sqlroutine) is
	// missing or made for other column types; they still work, plain.
	Routines []sqlroutine.Problem
}

// Err is the report as one error naming every problem, or nil.
func (r Report) Err() error {
	if len(r.Tables) == 0 && len(r.Failures) == 0 {
		return nil
	}
	var parts []string
	if len(r.Tables) > 0 {
		parts = append(parts, "the host's tables: "+r.Tables.Error())
	}
	for _, f := range r.Failures {
		parts = append(parts, "statement "+f.String())
	}
	return fmt.Errorf("schema check: %d problem(s): %s", len(r.Tables)+len(r.Failures), strings.Join(parts, "; "))
}

// errRolledBack ends the check's transaction.
var errRolledBack = errors.New("schema check done")

// Run checks the database conn is connected to. Its error is for a check
// that could not run (the connection lost); what the check found is in
// the report.
func Run(ctx context.Context, conn *pgx.Conn) (Report, error) {
	var r Report
	found, err := hostschema.Inspect(ctx, conn)
	if err != nil {
		return r, err
	}
	r.Tables = found.Check(hostschema.Installed)
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, s := range Statements() {
			r.Checked++
			if err := check(ctx, tx, s.SQL); err != nil {
				var pg *pgconn.PgError
				if !errors.As(err, &pg) {
					return fmt.Errorf("checking %s: %w", s.Name, err)
				}
				r.Failures = append(r.Failures, Failure{s.Name, err})
			}
		}
		if len(r.Tables) == 0 && len(r.Failures) == 0 {
			// A routine is made from its statement, which must prepare first.
			problems, err := sqlroutine.Check(ctx, tx.Conn(), routines.All())
			if err != nil {
				return fmt.Errorf("checking the statements' routines: %w", err)
			}
			r.Routines = problems
		}
		r.Checked++
		if err := enqueueOnce(ctx, tx); err != nil {
			var pg *pgconn.PgError
			if !errors.As(err, &pg) {
				return fmt.Errorf("checking integration_outbox_enqueue: %w", err)
			}
			r.Failures = append(r.Failures, Failure{"integration_outbox_enqueue", err})
		}
		return errRolledBack
	})
	if err != nil && !errors.Is(err, errRolledBack) {
		return r, err
	}
	return r, nil
}

// check prepares sql (parse analysis: every table, column, operator and
// type) and plans it with every argument null (what is left: an ON
// CONFLICT's arbiter index, say), inside a savepoint so that one failure
// does not end the transaction.
func check(ctx context.Context, tx pgx.Tx, sql string) error {
	sql = sqlfile.Positional(sql)
	return savepoint(ctx, tx, func(tx pgx.Tx) error {
		sd, err := tx.Prepare(ctx, "", sql)
		if err != nil {
			return err
		}
		args := make([]any, len(sd.ParamOIDs))
		_, err = tx.Exec(ctx, "explain "+sql, args...)
		return err
	})
}

// enqueueOnce runs the enqueue function (PL/pgSQL: its statements are
// checked only when it runs) for a connection inserted for it, all rolled
// back. A host table whose own rules refuse that connection row is not the
// enqueue's problem: the insert's failure is not reported.
func enqueueOnce(ctx context.Context, tx pgx.Tx) error {
	var org, conn string
	err := savepoint(ctx, tx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `insert into integration_connections (organization_id, provider, config_json)
			values (gen_random_uuid(), 'webhook', '{}') returning organization_id::text, id::text`).Scan(&org, &conn)
	})
	if err != nil {
		return nil
	}
	return savepoint(ctx, tx, func(tx pgx.Tx) error {
		var id string
		return tx.QueryRow(ctx, `select integration_outbox_enqueue($1::uuid, $2::uuid, 'push_purchase_order',
			'purchase_order', gen_random_uuid(), '{"schemaCheck": true}'::jsonb, 'integration-outbox-schema-check')::text`,
			org, conn).Scan(&id)
	})
}

func savepoint(ctx context.Context, tx pgx.Tx, fn func(pgx.Tx) error) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(sp); err != nil {
		if rbErr := sp.Rollback(context.WithoutCancel(ctx)); rbErr != nil {
			return errors.Join(err, rbErr)
		}
		return err
	}
	return sp.Commit(ctx) // releases the savepoint; the outer transaction is rolled back

}
