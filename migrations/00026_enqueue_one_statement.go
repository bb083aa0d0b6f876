package migrations

import (
	"context"
	"database/sql"

	"github.com/pressly/goose/v3"
)

// migration26: a call of integration_outbox_enqueue is one statement: its
// insert reads the connection (organization scoped) and probes the key
// indexes that hold rows the function must honour (the host's keyed rows
// from before migration 10, the function's rows of random ids from before
// migration 25), where it took a statement of its own for those before. A
// call that inserts nothing (a repeated key, a key the host's rows carry,
// another organization's connection) reads the connection again to raise
// the same error, and looks the key up as before. Migration 26 also
// decides the probes again, as migration 25 did: the rows that retention
// has deleted since no longer cost a probe at every call.
//
// Where the function keeps keys in the key index (the outbox's id is not
// unique, or the installed body does not keep keys by id), it applies that
// body. Down leaves the function as it is: the body works at 25 too.
var migration26 = goose.NewGoMigration(26, &goose.GoFunc{RunTx: enqueueRedecided}, nil)

func enqueueRedecided(ctx context.Context, tx *sql.Tx) error {
	n, unique, byID, err := readKeysByID(ctx, tx)
	if err != nil {
		return err
	}
	if !unique || !byID {
		n.KeyIndex = true
		return applyEnqueueTx(ctx, tx, n)
	}
	return applyKeysByID(ctx, tx, n)
}
