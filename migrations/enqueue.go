package migrations

import (
	"context"
	"database/sql"
	_ "embed"
	"fmt"

	"github.com/pressly/goose/v3"
)

// Enqueue is the one definition (create or replace) of
// integration_outbox_enqueue and integration_outbox_enqueue_existing, which
// migrations 2, 6, 9 and 12 apply. It works at every schema version from 2
// on: see the file's header for what it may use.
//
//go:embed enqueue/integration_outbox_enqueue.sql
var Enqueue string

// applyEnqueue is the up step of a migration that changed the enqueue
// function: it applies Enqueue. Earlier bodies are not kept anywhere, so no
// down step puts one back; each leaves the functions as they are (Enqueue
// works at the version it goes down to), and migration 2's drops them.
func applyEnqueue() *goose.GoFunc {
	return &goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
		return execOwn(ctx, tx, Enqueue)
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
