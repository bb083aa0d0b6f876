package migrations

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/pressly/goose/v3"

	"integration-outbox/internal/sqlroutine"
)

// migration23: the statements that cost far more to plan than to run (the
// claim, the push's start and record, the sweep, the idle check) run
// through routines, PL/pgSQL functions whose plans PostgreSQL keeps per
// server connection, which a transaction pooler keeps too
// (internal/sqlroutine). Each build's routines are made from its own
// statements, so they are not a migration's: make migrate installs those
// of its build after every run from this version on (internal/migrate),
// and Up has nothing to do. Down drops every routine of ours; the functions
// then send their statements plain.
var migration23 = goose.NewGoMigration(23, nil, &goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, sqlroutine.DropAllSQL); err != nil {
		return fmt.Errorf("dropping the statements' routines: %w", err)
	}
	return nil
}})
