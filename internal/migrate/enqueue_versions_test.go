package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"integration-outbox/internal/migrate"
)

// Migrations 2, 6, 9, 12, 22 and 25 all apply the enqueue function's one
// definition (migrations/enqueue; 25 without the key index, which its down
// step puts back), and no down step puts an earlier body back: the
// definition must work at every version from 2 on, the way up (a live
// upgrade, the bench's schemas stopped at 7, 9 and 10) and the way down. At
// each version: a new key inserts, the same key returns that row, a key of
// the host's own row from before the install returns the host's row, a key
// the worker cannot send is refused, and two calls in one transaction read
// created_at in call order; on the way down, a key enqueued at the latest
// version returns its row. Down to 1, the functions are gone.
func TestEnqueueWorksAtEveryVersionFromMigration2(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := freshDB(t)
	if err := migrate.UpWith(ctx, url, migrate.Config{Version: 1}); err != nil {
		t.Fatal(err)
	}
	org := "6f1a4c1e-0000-4000-8000-0000000000e0"
	var hostRow string
	if err := conn.QueryRow(ctx, `insert into external_integration_outbox (organization_id, status, idempotency_key, created_at)
		values ($1, 'completed', 'host-key', now() - interval '1 day') returning id::text`, org).Scan(&hostRow); err != nil {
		t.Fatal(err)
	}
	_, args := webhookConnection(t, conn, org)

	check := func(step string, v int64) {
		t.Helper()
		key := fmt.Sprintf("%s-%d", step, v)
		id, err := enqueue(ctx, conn, args(key))
		if err != nil {
			t.Fatalf("%s to %d: enqueue: %v", step, v, err)
		}
		if again, err := enqueue(ctx, conn, args(key)); err != nil || again != id {
			t.Errorf("%s to %d: the same key again: %s %v, want %s", step, v, again, err, id)
		}
		if got, err := enqueue(ctx, conn, args("host-key")); err != nil || got != hostRow {
			t.Errorf("%s to %d: the host's key: %s %v, want its row %s", step, v, got, err, hostRow)
		}
		var pgErr *pgconn.PgError
		if _, err := enqueue(ctx, conn, args(" padded")); !errors.As(err, &pgErr) || pgErr.Code != "22023" {
			t.Errorf("%s to %d: a key with a leading space: %v, want SQLSTATE 22023", step, v, err)
		}
		if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			first := mustEnqueue(t, tx, args(key+"-first"))
			second := mustEnqueue(t, tx, args(key+"-second"))
			var inOrder bool
			if err := tx.QueryRow(ctx, `select (select created_at from external_integration_outbox where id = $2)
				> (select created_at from external_integration_outbox where id = $1)`, first, second).Scan(&inOrder); err != nil {
				return err
			}
			if !inOrder {
				t.Errorf("%s to %d: two calls in one transaction do not read created_at in call order", step, v)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}

	latest := latestVersion(t)
	for v := int64(2); v <= latest; v++ {
		if err := migrate.UpWith(ctx, url, migrate.Config{Version: v}); err != nil {
			t.Fatalf("up to %d: %v", v, err)
		}
		check("up", v)
	}
	// A key enqueued at the latest version (kept unique by its id alone)
	// returns its row at every version on the way down.
	latestRow := mustEnqueue(t, conn, args("at-latest"))
	for v := latest - 1; v >= 2; v-- {
		downTo(t, url, v)
		check("down", v)
		if got, err := enqueue(ctx, conn, args("at-latest")); err != nil || got != latestRow {
			t.Errorf("down to %d: the key enqueued at %d: %s %v, want its row %s", v, latest, got, err, latestRow)
		}
	}
	if n := countRowsConn(t, conn, `select count(*) from external_integration_outbox where idempotency_key = 'at-latest'`); n != 1 {
		t.Errorf("%d rows hold the key enqueued at %d, want 1", n, latest)
	}
	downTo(t, url, 1)
	if n := countRowsConn(t, conn, `select count(*) from pg_proc where proname like 'integration_outbox_%' and proname in
		('integration_outbox_enqueue', 'integration_outbox_enqueue_existing', 'integration_outbox_key_id')`); n != 0 {
		t.Errorf("down to 1 left %d enqueue functions", n)
	}
}
