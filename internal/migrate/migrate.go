// Package migrate applies the embedded migrations with goose, each in its own
// transaction, to the database (and search_path schema) a URL names.
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

// Up applies every pending migration.
func Up(ctx context.Context, databaseURL string) error {
	return run(ctx, databaseURL, func(p *goose.Provider) error {
		_, err := p.Up(ctx)
		return err
	})
}

// Down rolls back the most recent migration.
func Down(ctx context.Context, databaseURL string) error {
	return run(ctx, databaseURL, func(p *goose.Provider) error {
		_, err := p.Down(ctx)
		return err
	})
}

func run(ctx context.Context, databaseURL string, fn func(*goose.Provider) error) error {
	db, err := open(databaseURL)
	if err != nil {
		return err
	}
	defer db.Close()
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
