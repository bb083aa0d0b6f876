package migrate_test

import (
	"context"
	"database/sql"
	"embed"
	"io/fs"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"integration-outbox/internal/migrate"
	"integration-outbox/migrations"
)

// installedV4 are migrations 1 to 4 as existing installs applied them: host
// objects added by plpgsql ownership functions inside each migration's
// transaction.
//
//go:embed testdata/installed-v4/*.sql
var installedV4 embed.FS

// schemaSnapshot is every index, column, constraint and function of the
// search_path schema, and what integration_outbox_owned_objects records.
// Of the enqueue function, whose probes migration 25 chooses by the rows
// the install holds, only whether it keeps keys by id.
const schemaSnapshot = `
select string_agg(x, E'\n' order by x) from (
    select 'index ' || tablename || ' ' || regexp_replace(indexdef, ' ON \S+ ', ' ON ') || ' valid=' || i.indisvalid as x
    from pg_indexes ix join pg_index i on i.indexrelid = (quote_ident(ix.schemaname) || '.' || quote_ident(ix.indexname))::regclass
    where schemaname = current_schema() and tablename <> 'integration_outbox_schema_version'
    union all
    select 'column ' || table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '')
    from information_schema.columns where table_schema = current_schema() and table_name <> 'integration_outbox_schema_version'
    union all
    select 'constraint ' || conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid) || ' validated=' || convalidated
    from pg_constraint where connamespace = current_schema()::regnamespace and conrelid <> 'integration_outbox_schema_version'::regclass
    union all
    -- The enqueue function's probes follow the rows the install holds
    -- (migration 25): only whether it keeps keys by id is compared.
    select 'function ' || oid::regprocedure || ' ' || case when proname = 'integration_outbox_enqueue'
        then 'keeps keys by id: ' || (prosrc like '%on conflict (id) do nothing%') else md5(prosrc) end
    from pg_proc where pronamespace = current_schema()::regnamespace
    union all
    select 'owned ' || migration || ' ' || kind || ' ' || table_name || '.' || object_name from integration_outbox_owned_objects
) s`

func snapshot(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var s string
	if err := conn.QueryRow(context.Background(), schemaSnapshot).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// An install made before the Installer (migrations 1 to 4 applied by their
// old files) upgrades to exactly the schema of a fresh install, keeps its
// rows, and rolls back to nothing of ours like a fresh install.
func TestUpgradeOfAnExistingInstallMatchesAFreshInstall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	freshURL, freshConn := freshDB(t)
	if err := migrate.Up(ctx, freshURL); err != nil {
		t.Fatal(err)
	}
	want := snapshot(t, freshConn)

	url, conn := freshDB(t)
	if _, err := conn.Exec(ctx, migrations.HostStandIn); err != nil {
		t.Fatal(err)
	}
	old, err := fs.Sub(installedV4, "testdata/installed-v4")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	applyOld(ctx, t, db, old)
	if _, err := conn.Exec(ctx, `insert into external_integration_outbox (organization_id, status) values (gen_random_uuid(), 'queued')`); err != nil {
		t.Fatal(err)
	}
	var oldFunctions int
	if err := conn.QueryRow(ctx, `select count(*) from pg_proc where proname like 'integration_outbox_own%'`).Scan(&oldFunctions); err != nil || oldFunctions != 3 {
		t.Fatalf("the old install has %d ownership functions (%v), want 3", oldFunctions, err)
	}

	if err := migrate.Up(ctx, url); err != nil {
		t.Fatalf("upgrading: %v", err)
	}
	if got := snapshot(t, conn); got != want {
		t.Errorf("upgraded schema differs from a fresh install's:\n got %s\nwant %s", got, want)
	}
	if n := countRowsConn(t, conn, `select count(*) from external_integration_outbox`); n != 1 {
		t.Errorf("the upgrade kept %d host rows, want 1", n)
	}
	migrateDownToZero(ctx, t, url)
	if n := countRowsConn(t, conn, `select count(*) from pg_proc where proname like 'integration_outbox%'
		or proname like '%enqueue%'`); n != 0 {
		t.Errorf("down to zero left %d functions of ours", n)
	}
	if n := countRowsConn(t, conn, `select count(*) from information_schema.columns
		where table_name = 'external_integration_outbox' and column_name in ('claim_token', 'idempotency_enforced')`); n != 0 {
		t.Errorf("down to zero left %d columns of ours", n)
	}
}

func applyOld(ctx context.Context, t *testing.T, db *sql.DB, fsys fs.FS) {
	t.Helper()
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithTableName(migrate.VersionTable),
		goose.WithDisableGlobalRegistry(true), goose.WithLogger(goose.NopLogger()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("applying the old migrations: %v", err)
	}
}

func migrateDownToZero(ctx context.Context, t *testing.T, url string) {
	t.Helper()
	if err := migrate.DownTo(ctx, url, 0); err != nil {
		t.Fatal(err)
	}
}

func countRowsConn(t *testing.T, conn *pgx.Conn, sql string) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
