package migrations

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// RedecideEnqueueVersion is the migration from which every make migrate run
// decides the enqueue function's probes again (RedecideEnqueue).
const RedecideEnqueueVersion = 26

// RedecideEnqueue decides the enqueue function's probes again, as
// migration 26 did, and applies the body only where the decision differs
// from the installed one: the probe of the legacy key index goes once
// retention has deleted the host's keyed rows from before migration 10,
// and the probe of the key index once the function's rows of random ids
// (from before migration 25) are gone. Neither kind of row comes back: the
// host's later rows read idempotency_enforced NULL and enter neither index,
// and no body from before migration 25 runs at 26. It reports whether it
// applied a body. make migrate runs it at the build's last migration, after
// every run (internal/migrate).
func RedecideEnqueue(ctx context.Context, db *sql.DB) (applied bool, err error) {
	err = inTx(ctx, db, func(tx *sql.Tx) error {
		n, unique, byID, err := readKeysByID(ctx, tx)
		if err != nil {
			return err
		}
		if !unique || !byID {
			// The key index keeps the keys (migration 26 applied that body,
			// which has no probe to decide).
			return nil
		}
		if err := readProbes(ctx, tx, &n); err != nil {
			return err
		}
		want, err := EnqueueSQL(n)
		if err != nil {
			return err
		}
		var installed string
		if err := tx.QueryRowContext(ctx, installedEnqueueSQL, n.Schema).Scan(&installed); err != nil {
			return fmt.Errorf("reading the installed enqueue function: %w", err)
		}
		if body, ok := enqueueBody(want); ok && body == installed {
			return nil
		}
		applied = true
		return applyEnqueueTx(ctx, tx, n)
	})
	return applied, err
}

// installedEnqueueSQL reads the body of the enqueue function of the schema
// ($1), empty where there is none.
const installedEnqueueSQL = `
select coalesce((select p.prosrc from pg_proc p
    where p.oid = to_regprocedure($1 || '.integration_outbox_enqueue(uuid, uuid, text, text, uuid, jsonb, text)')), '')`

// enqueueBody is the body of integration_outbox_enqueue in stmts (Enqueue
// with its names filled in): what PostgreSQL keeps as the function's
// prosrc, the text between its dollar quotes.
func enqueueBody(stmts string) (string, bool) {
	_, fn, ok := strings.Cut(stmts, ".integration_outbox_enqueue(\n")
	if !ok {
		return "", false
	}
	_, body, ok := strings.Cut(fn, "as $fn$")
	if !ok {
		return "", false
	}
	body, _, ok = strings.Cut(body, "$fn$;")
	return body, ok
}
