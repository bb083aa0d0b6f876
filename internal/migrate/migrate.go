// Package migrate applies the embedded migrations with goose, each in its own
// transaction, to the database (and search_path schema) a URL names.
//
// Up first creates the stand-in of the host application's tables wherever they
// are missing (migrations.HostStandIn); nothing reverts it. The numbered
// migrations add only what this project owns, and their down steps remove only
// that: Down never drops a host table or a column the host had.
package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"integration-outbox/migrations"
)

// VersionTable is goose's bookkeeping table, named so it cannot clash with the
// host application's own goose_db_version.
const VersionTable = "integration_outbox_schema_version"

// Up creates the host tables that are missing, then applies every pending
// migration.
func Up(ctx context.Context, databaseURL string) error {
	return run(ctx, databaseURL, true, func(p *goose.Provider) error {
		_, err := p.Up(ctx)
		return err
	})
}

// Down rolls back the most recent migration: it removes what that migration
// added, never a host table or its rows.
func Down(ctx context.Context, databaseURL string) error {
	return run(ctx, databaseURL, false, func(p *goose.Provider) error {
		_, err := p.Down(ctx)
		return err
	})
}

func run(ctx context.Context, databaseURL string, up bool, fn func(*goose.Provider) error) error {
	db, err := open(databaseURL)
	if err != nil {
		return err
	}
	defer db.Close()
	if up {
		if err := createHostStandIn(ctx, db); err != nil {
			return err
		}
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("creating migration lock: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithTableName(VersionTable), goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true), goose.WithLogger(goose.NopLogger()))
	if err != nil {
		return fmt.Errorf("loading migrations: %w", err)
	}
	if err := fn(p); err != nil {
		return fmt.Errorf("applying migrations: %w", err)
	}
	slog.DebugContext(ctx, "migrations applied")
	return nil
}

// standInLockKey ("io_stand" in ASCII) serialises concurrent stand-in runs, so
// two migrators never race on the same create table if not exists.
const standInLockKey = 0x696f5f7374616e64

// createHostStandIn creates, in one transaction, each host table the database
// lacks; existing host tables are left as they are.
func createHostStandIn(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("creating host schema stand-in: %w", err)
	}
	defer tx.Rollback() // a no-op after Commit
	if _, err := tx.ExecContext(ctx, "select pg_advisory_xact_lock($1)", int64(standInLockKey)); err != nil {
		return fmt.Errorf("locking host schema stand-in: %w", err)
	}
	if _, err := tx.ExecContext(ctx, migrations.HostStandIn); err != nil {
		return fmt.Errorf("creating host schema stand-in: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("creating host schema stand-in: %w", err)
	}
	return nil
}

func open(databaseURL string) (*sql.DB, error) {
	if databaseURL == "" {
		return nil, fmt.Errorf("DATABASE_URL is empty")
	}
	cfg, err := pgxConfig(databaseURL)
	if err != nil {
		return nil, err
	}
	return stdlib.OpenDB(*cfg), nil
}
