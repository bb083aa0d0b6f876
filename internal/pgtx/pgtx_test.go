package pgtx_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/pgtx"
)

// fakeTx records how the transaction ended. Do's control flow is pure
// logic; the packages that use it run it against PostgreSQL.
type fakeTx struct {
	pgx.Tx
	committed, rolledBack bool
	rollbackCtxErr        error // ctx.Err() seen by Rollback
	commitErr             error
	rollbackErr           error
}

func (t *fakeTx) Commit(ctx context.Context) error {
	if t.commitErr != nil {
		return t.commitErr
	}
	t.committed = true
	return nil
}

func (t *fakeTx) Rollback(ctx context.Context) error {
	if t.committed {
		return pgx.ErrTxClosed
	}
	t.rolledBack, t.rollbackCtxErr = true, ctx.Err()
	return t.rollbackErr
}

type fakeDB struct {
	tx   *fakeTx
	opts pgx.TxOptions
	err  error
}

func (d *fakeDB) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	d.opts = opts
	if d.err != nil {
		return nil, d.err
	}
	return d.tx, nil
}

func TestDoCommitsWhenFnSucceeds(t *testing.T) {
	t.Parallel()
	db := &fakeDB{tx: &fakeTx{}}
	opts := pgx.TxOptions{AccessMode: pgx.ReadOnly}
	ran := false
	err := pgtx.Do(context.Background(), db, opts, func(tx pgx.Tx) error {
		ran = tx == pgx.Tx(db.tx)
		return nil
	})
	if err != nil || !ran || !db.tx.committed || db.opts != opts {
		t.Fatalf("err %v, fn ran on the tx %v, committed %v, options %+v; want nil, true, true, %+v",
			err, ran, db.tx.committed, db.opts, opts)
	}
}

func TestDoRollsBackAndKeepsFnError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	db := &fakeDB{tx: &fakeTx{rollbackErr: errors.New("rollback failed")}}
	err := pgtx.Do(context.Background(), db, pgx.TxOptions{}, func(pgx.Tx) error { return boom })
	if err != boom || db.tx.committed || !db.tx.rolledBack {
		t.Fatalf("err %v, committed %v, rolled back %v; want fn's error unchanged, no commit, a rollback",
			err, db.tx.committed, db.tx.rolledBack)
	}
}

func TestDoRollsBackOnAnUncancelledContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	db := &fakeDB{tx: &fakeTx{}}
	err := pgtx.Do(ctx, db, pgx.TxOptions{}, func(pgx.Tx) error {
		cancel()
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) || !db.tx.rolledBack || db.tx.rollbackCtxErr != nil {
		t.Fatalf("err %v, rolled back %v with ctx error %v; want context.Canceled and a rollback on a live context",
			err, db.tx.rolledBack, db.tx.rollbackCtxErr)
	}
}

func TestDoRollsBackWhenFnPanics(t *testing.T) {
	t.Parallel()
	db := &fakeDB{tx: &fakeTx{}}
	defer func() {
		if recover() == nil || !db.tx.rolledBack || db.tx.committed {
			t.Fatalf("rolled back %v, committed %v; want the panic to go on after a rollback", db.tx.rolledBack, db.tx.committed)
		}
	}()
	_ = pgtx.Do(context.Background(), db, pgx.TxOptions{}, func(pgx.Tx) error { panic("fn failed") })
}

func TestDoNamesTheFailedStep(t *testing.T) {
	t.Parallel()
	refused := errors.New("connection refused")
	err := pgtx.Do(context.Background(), &fakeDB{err: refused}, pgx.TxOptions{}, func(pgx.Tx) error {
		t.Fatal("fn ran without a transaction")
		return nil
	})
	if !errors.Is(err, refused) || err.Error() != "beginning the transaction: connection refused" {
		t.Fatalf("begin failure: %v", err)
	}
	serialization := errors.New("could not serialize access")
	db := &fakeDB{tx: &fakeTx{commitErr: serialization}}
	err = pgtx.Do(context.Background(), db, pgx.TxOptions{}, func(pgx.Tx) error { return nil })
	if !errors.Is(err, serialization) || err.Error() != "committing: could not serialize access" || !db.tx.rolledBack {
		t.Fatalf("commit failure: %v, rolled back %v", err, db.tx.rolledBack)
	}
}

// An empty value binds as SQL null; any other is passed through a pointer
// to a copy.
func TestNullableBindsEmptyValuesAsNull(t *testing.T) {
	if got := pgtx.Nullable(""); got != nil {
		t.Errorf(`Nullable("") = %q, want nil`, *got)
	}
	if got := pgtx.Nullable("org-a"); got == nil || *got != "org-a" {
		t.Errorf(`Nullable("org-a") = %v, want a pointer to "org-a"`, got)
	}
	if got := pgtx.NullableTime(time.Time{}); got != nil {
		t.Errorf("NullableTime(zero) = %v, want nil", *got)
	}
	at := time.Date(2026, 12, 3, 5, 0, 0, 0, time.UTC)
	if got := pgtx.NullableTime(at); got == nil || !got.Equal(at) {
		t.Errorf("NullableTime(%v) = %v, want a pointer to it", at, got)
	}
}
