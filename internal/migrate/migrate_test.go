package migrate_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/migrate"
	"integration-outbox/internal/testenv"
)

var pg *testenv.Postgres

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.WithPostgres(&pg))
}

func freshDB(t *testing.T) (string, *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	url, err := pg.CreateDatabase(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return url, conn
}

func columns(t *testing.T, conn *pgx.Conn, schema, table string) map[string]bool {
	t.Helper()
	rows, err := conn.Query(context.Background(),
		`select column_name from information_schema.columns where table_schema = $1 and table_name = $2`, schema, table)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

func TestUpOnEmptyDatabaseTwiceAndDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := freshDB(t)
	for range 2 {
		if err := migrate.Up(ctx, url); err != nil {
			t.Fatal(err)
		}
	}
	cols := columns(t, conn, "public", "external_integration_outbox")
	for _, c := range []string{"id", "organization_id", "integration_connection_id", "provider", "command_type",
		"local_entity_type", "local_entity_id", "payload_json", "idempotency_key", "status", "attempt_count",
		"next_attempt_at", "last_error", "provider_reference", "provider_status", "completed_at", "created_at",
		"claim_token", "claimed_at", "lease_expires_at", "started_at", "updated_at"} {
		if !cols[c] {
			t.Errorf("external_integration_outbox lacks column %s", c)
		}
	}
	if _, err := conn.Exec(ctx, `insert into external_integration_outbox (organization_id, status) values (gen_random_uuid(), 'bogus')`); err == nil {
		t.Error("status check constraint accepted 'bogus'")
	}
	if err := migrate.Down(ctx, url); err != nil { // the latest migration
		t.Fatal(err)
	}
	downTo(t, url, 0) // and every earlier one
	// The outbox is the host's: down removes our lease columns, not the table.
	cols = columns(t, conn, "public", "external_integration_outbox")
	if !cols["payload_json"] || cols["claim_token"] {
		t.Errorf("after down external_integration_outbox has columns %v, want the host's without claim_token", cols)
	}
}

// seedOutboxTable creates the host's outbox table as the old worker knew it
// (no lease columns), under the qualified name.
func seedOutboxTable(name string) string {
	return `create table ` + name + ` (
		id uuid primary key default gen_random_uuid(), organization_id uuid not null,
		integration_connection_id uuid not null, provider text not null, command_type text not null,
		local_entity_type text not null, local_entity_id uuid not null, payload_json jsonb not null default '{}',
		idempotency_key text not null, status text not null default 'queued', attempt_count int not null default 0,
		next_attempt_at timestamptz, last_error text, provider_reference text, provider_status text,
		completed_at timestamptz, created_at timestamptz not null default now());`
}

// seedConnectionsTable is the host's connections table, created as name.
func seedConnectionsTable(name string) string {
	return `create table ` + name + ` (id uuid primary key default gen_random_uuid(),
		organization_id uuid not null, location_id uuid, provider text not null,
		credential_reference text, config_json jsonb not null default '{}', created_at timestamptz not null default now(),
		updated_at timestamptz not null default now());`
}

// The host application may have created its tables (seed shape, no lease
// columns) in its own schema before we migrate: the migration completes them.
func TestUpOverHostTablesInSearchPathSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := freshDB(t)
	_, err := conn.Exec(ctx, `
		create schema backoffice;
		`+seedOutboxTable("backoffice.external_integration_outbox")+`
		insert into backoffice.external_integration_outbox (organization_id, integration_connection_id, provider,
			command_type, local_entity_type, local_entity_id, idempotency_key)
			values (gen_random_uuid(), gen_random_uuid(), 'webhook', 'push_purchase_order', 'purchase_order', gen_random_uuid(), 'k1');`)
	if err != nil {
		t.Fatal(err)
	}
	schemaURL := url + "&search_path=backoffice"
	if err := migrate.Up(ctx, schemaURL); err != nil {
		t.Fatal(err)
	}
	cols := columns(t, conn, "backoffice", "external_integration_outbox")
	for _, c := range []string{"claim_token", "lease_expires_at", "started_at", "updated_at"} {
		if !cols[c] {
			t.Errorf("host table lacks %s after migrate", c)
		}
	}
	if len(columns(t, conn, "public", "external_integration_outbox")) != 0 {
		t.Error("migration created tables in public instead of the search_path schema")
	}
	var n int
	if err := conn.QueryRow(ctx, `select count(*) from backoffice.external_integration_outbox`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("host row lost: n=%d err=%v", n, err)
	}

	// Down works in the same schema and keeps the host's table and row.
	for range migrationCount(t) {
		if err := migrate.Down(ctx, schemaURL); err != nil {
			t.Fatal(err)
		}
	}
	cols = columns(t, conn, "backoffice", "external_integration_outbox")
	if cols["claim_token"] || !cols["idempotency_key"] {
		t.Errorf("after down the host table has columns %v, want the host's only", cols)
	}
	if err := conn.QueryRow(ctx, `select count(*) from backoffice.external_integration_outbox`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("host row lost by down: n=%d err=%v", n, err)
	}
}
