package migrate_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/migrate"
	"integration-outbox/migrations"
)

const legacyKeyIdx = "external_integration_outbox_legacy_key_idx"

// legacyKeyEntries counts the entries on the leaf pages of the legacy key
// index: what the host's inserts wrote into it.
func legacyKeyEntries(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	return indexEntries(t, conn, legacyKeyIdx)
}

// indexEntries counts the entries on the leaf pages of the b-tree index
// (pageinspect).
func indexEntries(t *testing.T, conn *pgx.Conn, index string) int {
	t.Helper()
	if _, err := conn.Exec(context.Background(), `create extension if not exists pageinspect`); err != nil {
		t.Fatal(err)
	}
	return countRowsConn(t, conn, `
		select coalesce(sum(s.live_items), 0)::int
		from generate_series(1, (pg_relation_size('`+index+`') / current_setting('block_size')::int) - 1) b,
		    lateral bt_page_stats('`+index+`', b::int) s
		where s.type = 'l'`)
}

// From migration 10 a row the host inserts itself reads idempotency_enforced
// NULL and enters neither key index, so the host's inserts stop paying for
// the legacy key index; every row inserted before it keeps reading false
// and the enqueue still answers their keys with them. A rerun changes
// nothing; the down step sets the default back.
func TestHostInsertsFromMigration10SkipTheKeyIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := freshDB(t)
	org := "6f1a4c1e-0000-4000-8000-0000000000a0"
	hostInsert := func(key string) string {
		t.Helper()
		var id string
		if err := conn.QueryRow(ctx, `insert into external_integration_outbox (organization_id, status, idempotency_key, created_at)
			values ($1, 'completed', $2, now() - interval '1 day') returning id::text`, org, key).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	enforced := func(id string) string {
		t.Helper()
		var v *bool
		if err := conn.QueryRow(ctx, `select idempotency_enforced from external_integration_outbox where id = $1`, id).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v == nil {
			return "null"
		}
		if *v {
			return "true"
		}
		return "false"
	}

	// A row from before the install (the column's missing value) and one from
	// between migrations 2 and 10 (the default, stored).
	if _, err := conn.Exec(ctx, migrations.HostStandIn); err != nil {
		t.Fatal(err)
	}
	before := hostInsert("before-install")
	if err := migrate.UpWith(ctx, url, migrate.Config{Version: 9}); err != nil {
		t.Fatal(err)
	}
	at9 := hostInsert("at-9")
	if n := legacyKeyEntries(t, conn); n != 2 {
		t.Fatalf("at 9 the legacy key index holds %d entries, want the host's 2", n)
	}
	for range 2 { // the second run finds the change made
		if err := migrate.Up(ctx, url); err != nil {
			t.Fatal(err)
		}
	}
	at10 := hostInsert("at-10")
	for id, want := range map[string]string{before: "false", at9: "false", at10: "null"} {
		if got := enforced(id); got != want {
			t.Errorf("row %s reads idempotency_enforced %s, want %s", id, got, want)
		}
	}
	if n := legacyKeyEntries(t, conn); n != 2 {
		t.Errorf("after a host insert at 10 the legacy key index holds %d entries, want still 2", n)
	}

	_, args := webhookConnection(t, conn, org)
	for key, want := range map[string]string{"before-install": before, "at-9": at9} {
		if id, err := enqueue(ctx, conn, args(key)); err != nil || id != want {
			t.Errorf("enqueue of the host's older key %q: %s %v, want its row %s", key, id, err, want)
		}
	}
	// A key the host wrote itself after the install is not looked up (the
	// host enqueues through the function): the function inserts its own row.
	id, err := enqueue(ctx, conn, args("at-10"))
	if err != nil || id == at10 {
		t.Errorf("enqueue of a key only a host row from 10 on holds: %s %v, want a row of its own", id, err)
	}
	// From migration 25 the enqueued row is unique by its id, and enters
	// neither key index either.
	if got := enforced(id); got != "null" {
		t.Errorf("the enqueued row reads idempotency_enforced %s, want null", got)
	}

	if err := migrate.DownTo(ctx, url, 9); err != nil {
		t.Fatal(err)
	}
	if got := enforced(hostInsert("down-at-9")); got != "false" {
		t.Errorf("after the down step a host insert reads idempotency_enforced %s, want false", got)
	}
	if got := enforced(at10); got != "null" {
		t.Errorf("the down step changed a host row: %s", got)
	}
}
