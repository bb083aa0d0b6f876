package migrations

import (
	"context"
	"database/sql"

	"github.com/pressly/goose/v3"
)

// migration2 installs the producer's entry point: the host enqueues a command
// with integration_outbox_enqueue(...) inside its own business transaction
// (docs/producers.md). Up applies the one definition (Enqueue); down drops
// the three functions.
//
// The idempotency_enforced column and the two key indexes on the host's
// table are declared for this migration in internal/migrate/hostobjects.go:
// the Installer adds them (indexes built CONCURRENTLY) before this step runs,
// only where the host lacks them, and drops them on the way down only if it
// added them. Together the two indexes hold one entry per row with a key: the
// unique one for the function's rows, the plain one for every other row.
var migration2 = goose.NewGoMigration(2, applyEnqueue(),
	&goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
		return execOwn(ctx, tx, `
			drop function if exists integration_outbox_enqueue(uuid, uuid, text, text, uuid, jsonb, text);
			drop function if exists integration_outbox_enqueue_existing(uuid, text);
			drop function if exists integration_outbox_key_id(uuid, text);`)
	}})
