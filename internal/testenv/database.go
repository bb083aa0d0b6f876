package testenv

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"integration-outbox/internal/migrate"
)

var templateMu sync.Mutex

// templates maps a cluster URL to its migrated template database.
var templates = map[string]string{}

// MigratedDatabase returns the URL of a fresh database with every migration
// applied, cloned from a template migrated once per cluster and test process.
func (p *Postgres) MigratedDatabase(ctx context.Context) (string, error) {
	templateMu.Lock()
	tmpl, ok := templates[p.URL]
	if !ok {
		url, err := p.CreateDatabase(ctx, "")
		if err != nil {
			templateMu.Unlock()
			return "", err
		}
		if err := migrate.Up(ctx, url); err != nil {
			templateMu.Unlock()
			return "", fmt.Errorf("migrating template: %w", err)
		}
		tmpl = databaseName(url)
		templates[p.URL] = tmpl
	}
	templateMu.Unlock()
	return p.CreateDatabase(ctx, tmpl)
}

// NewDB returns a pool on a fresh migrated database, closed when the test ends.
func (p *Postgres) NewDB(t testing.TB) *Fixture {
	t.Helper()
	ctx := context.Background()
	url, err := p.MigratedDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pool := OpenPool(t, url, func(cfg *pgxpool.Config) { cfg.MaxConns = 20 })
	return &Fixture{Pool: pool, URL: url}
}

// OpenPool opens a pool on the database at url, configured by configure
// when it is not nil (MaxConns, a tracer, runtime parameters), and closes
// it when the test ends.
func OpenPool(t testing.TB, url string, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if configure != nil {
		configure(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func databaseName(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return ""
	}
	return cfg.Database
}
