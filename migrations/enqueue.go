package migrations

import (
	"context"
	"database/sql"
	_ "embed"
	"fmt"
	"strings"
	"text/template"

	"github.com/pressly/goose/v3"
)

// Enqueue is the one definition (create or replace) of
// integration_outbox_enqueue and integration_outbox_enqueue_existing, which
// migrations 2, 6, 9, 12, 22, 25 and 26 apply. It works at every schema version
// from 2 on: see the file's header for what it may use. Its names in double
// braces are EnqueueNames, filled in by EnqueueSQL.
//
//go:embed enqueue/integration_outbox_enqueue.sql
var Enqueue string

var enqueueTemplate = template.Must(template.New("enqueue").Option("missingkey=error").Parse(Enqueue))

// EnqueueNames are the schema-qualified names the enqueue functions use, so
// that a call resolves them without setting the caller's search_path.
type EnqueueNames struct {
	Outbox, Connections string // the host's tables, as the search_path finds them
	Schema              string // where the functions are created: the first schema of the search_path
	// KeyIndex: the function's rows are kept unique by the key index
	// (idempotency_enforced true), as before migration 25; else by their
	// id alone, which needs the outbox's id unique (keyIDUnique).
	KeyIndex bool
	// KeyProbe (without KeyIndex): the function also probes the key index,
	// for the rows of random ids a body from before migration 25 inserted
	// (randomIDKeysSQL); once none is left, that probe is a cost for
	// nothing, and no row of a random id enters the key index again.
	KeyProbe bool
	// HostKeys (without KeyIndex): the function probes the legacy key
	// index, for the host's rows from before migration 10
	// (hostKeysSQL); the host's later rows never enter it.
	HostKeys bool
}

// EnqueueSQL is Enqueue with names filled in.
func EnqueueSQL(n EnqueueNames) (string, error) {
	var b strings.Builder
	if err := enqueueTemplate.Execute(&b, n); err != nil {
		return "", fmt.Errorf("filling in the enqueue functions' names: %w", err)
	}
	return b.String(), nil
}

// enqueueNamesSQL reads EnqueueNames as the transaction's search_path finds
// them: quoted where a name needs it, empty where nothing is found.
const enqueueNamesSQL = `
select coalesce((select format('%I.%I', n.nspname, c.relname) from pg_class c
        join pg_namespace n on n.oid = c.relnamespace where c.oid = to_regclass('external_integration_outbox')), ''),
    coalesce((select format('%I.%I', n.nspname, c.relname) from pg_class c
        join pg_namespace n on n.oid = c.relnamespace where c.oid = to_regclass('integration_connections')), ''),
    coalesce(quote_ident(current_schema()), '')`

// readEnqueueNames reads EnqueueNames in tx, as its search_path finds them.
func readEnqueueNames(ctx context.Context, tx *sql.Tx) (EnqueueNames, error) {
	var n EnqueueNames
	if err := tx.QueryRowContext(ctx, enqueueNamesSQL).Scan(&n.Outbox, &n.Connections, &n.Schema); err != nil {
		return n, fmt.Errorf("reading where the host's tables are: %w", err)
	}
	switch {
	case n.Outbox == "":
		return n, fmt.Errorf("the host table external_integration_outbox does not exist in the search_path schema")
	case n.Connections == "":
		return n, fmt.Errorf("the host table integration_connections does not exist in the search_path schema")
	case n.Schema == "":
		return n, fmt.Errorf("no schema of the search_path exists to create the enqueue functions in")
	}
	return n, nil
}

// applyEnqueueTx applies Enqueue with n's names in tx.
func applyEnqueueTx(ctx context.Context, tx *sql.Tx, n EnqueueNames) error {
	stmts, err := EnqueueSQL(n)
	if err != nil {
		return err
	}
	return execOwn(ctx, tx, stmts)
}

// applyEnqueue is the up step of a migration up to 22 that changed the
// enqueue function: it applies Enqueue with the key index (KeyIndex), its
// names read in the migration's transaction. Earlier bodies are not kept
// anywhere, so no down step puts one back; each leaves the functions as they
// are (Enqueue works at the version it goes down to), and migration 2's
// drops them. Migrations 25 and 26 apply Enqueue without the key index
// where the outbox's id is unique.
func applyEnqueue() *goose.GoFunc {
	return &goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
		n, err := readEnqueueNames(ctx, tx)
		if err != nil {
			return err
		}
		n.KeyIndex = true
		return applyEnqueueTx(ctx, tx, n)
	}}
}

// execOwn runs statements that touch only our own functions in tx; a lock
// it cannot get within the timeout is another session's: the run fails and
// can be repeated.
func execOwn(ctx context.Context, tx *sql.Tx, statements string) error {
	if _, err := tx.ExecContext(ctx, "set local lock_timeout = '5s'"); err != nil {
		return fmt.Errorf("setting lock_timeout: %w", err)
	}
	if _, err := tx.ExecContext(ctx, statements); err != nil {
		return fmt.Errorf("applying the enqueue functions: %w", err)
	}
	return nil
}
