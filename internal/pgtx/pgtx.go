// Package pgtx holds what the stores share with PostgreSQL: running a
// function in one transaction (Do) and binding optional values as null.
package pgtx

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Beginner opens transactions (a *pgxpool.Pool, a *pgx.Conn, or a pgx.Tx
// through Savepoints).
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Savepoints returns db as a Beginner when it can open transactions: a
// pool or a connection as it is, a transaction (pgx.Tx, whose Begin opens a
// savepoint; the options of the outer transaction hold) through an adapter.
// ok is false for anything else.
func Savepoints(db any) (b Beginner, ok bool) {
	switch db := db.(type) {
	case Beginner:
		return db, true
	case interface {
		Begin(ctx context.Context) (pgx.Tx, error)
	}:
		return savepoint{db}, true
	}
	return nil, false
}

type savepoint struct {
	tx interface {
		Begin(ctx context.Context) (pgx.Tx, error)
	}
}

func (s savepoint) BeginTx(ctx context.Context, _ pgx.TxOptions) (pgx.Tx, error) {
	return s.tx.Begin(ctx)
}

// Do begins a transaction with opts, runs fn in it and commits when fn
// returns nil. When fn fails (or panics) the transaction is rolled back and
// fn's error is returned as it is.
//
// It is pgx.BeginTxFunc with two differences (River's dbutil.WithTx does
// the same): the rollback runs on context.WithoutCancel(ctx), so a
// transaction whose ctx has expired still ends at once instead of leaving
// its connection to be closed, and a failed rollback never replaces fn's
// error. Begin and commit errors say which of the two failed.
func Do(ctx context.Context, db Beginner, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("beginning the transaction: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // a no-op after Commit
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

// Nullable binds an optional text parameter: nil (SQL null) for "", else a
// pointer to s.
func Nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// NullableTime binds an optional timestamp parameter: nil (SQL null) for the
// zero time, else a pointer to t.
func NullableTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
