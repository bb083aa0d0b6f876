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
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &Fixture{Pool: pool, URL: url}
}

func databaseName(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return ""
	}
	return cfg.Database
}
