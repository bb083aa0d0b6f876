package migrations

import (
	"context"
	"database/sql"
	_ "embed"
	"fmt"
	"strings"

	"github.com/pressly/goose/v3"
)

// Enqueue is integration_outbox_enqueue's one definition (create or
// replace), which migration 12 applies.
//
//go:embed enqueue/integration_outbox_enqueue.sql
var Enqueue string

// Go are the migrations written in Go, applied in version order with the
// .sql files of FS.
var Go = []*goose.Migration{
	// 12: commands enqueued in one transaction keep the order of the calls
	// (created_at later than the call before it in the transaction). Up
	// applies the definition in enqueue/; down puts back migration 9's. On
	// the host's table it changes created_at's default (internal/migrate
	// hostObjects).
	goose.NewGoMigration(12,
		&goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
			return applyFunction(ctx, tx, Enqueue)
		}},
		&goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
			previous, err := upSection("00009_enqueue_new_key_first.sql")
			if err != nil {
				return err
			}
			return applyFunction(ctx, tx, previous)
		}}),
}

// applyFunction runs a function's definition in tx. It touches only our own
// functions; a lock it cannot get within the timeout is another session's:
// the run fails and can be repeated.
func applyFunction(ctx context.Context, tx *sql.Tx, definition string) error {
	if _, err := tx.ExecContext(ctx, "set local lock_timeout = '5s'"); err != nil {
		return fmt.Errorf("setting lock_timeout: %w", err)
	}
	if _, err := tx.ExecContext(ctx, definition); err != nil {
		return fmt.Errorf("creating the function: %w", err)
	}
	return nil
}

// upSection is the up step of the .sql migration name, without goose's
// annotations: what a later migration's down step applies again.
func upSection(name string) (string, error) {
	b, err := FS.ReadFile(name)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", name, err)
	}
	_, up, ok := strings.Cut(string(b), "-- +goose Up\n")
	if !ok {
		return "", fmt.Errorf("%s has no up step", name)
	}
	up, _, _ = strings.Cut(up, "-- +goose Down\n")
	var kept []string
	for _, line := range strings.Split(up, "\n") {
		if !strings.HasPrefix(line, "-- +goose ") {
			kept = append(kept, line)
		}
	}
	return strings.Join(kept, "\n"), nil
}
