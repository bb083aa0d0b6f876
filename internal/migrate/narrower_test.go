package migrate_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/migrate"
)

// The indexes migration 8 drops: each was migration 1's.
var droppedBy8 = []string{
	"external_integration_outbox_claimable_idx",
	"external_integration_outbox_leased_idx",
	"external_integration_outbox_org_status_idx",
}

const requeueableIdx = "external_integration_outbox_org_requeueable_idx"

// outboxIndexNames lists the names of the outbox's indexes.
func outboxIndexNames(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	var names []string
	for _, def := range tableIndexes(t, conn, "external_integration_outbox") {
		name, _, _ := strings.Cut(def, ":")
		names = append(names, name)
	}
	return names
}

// An install at migration 7 upgrades to exactly a fresh install's schema
// (the three indexes dropped, the narrower one added, the bookkeeping
// forgetting the dropped ones); the down step of 8 brings back exactly the
// schema of 7, and up again matches the fresh install once more.
func TestMigration8UpgradeMatchesAFreshInstallAndDownRestores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	freshURL, freshConn := freshDB(t)
	if err := migrate.Up(ctx, freshURL); err != nil {
		t.Fatal(err)
	}
	fresh := snapshot(t, freshConn)
	names := outboxIndexNames(t, freshConn)
	for _, name := range droppedBy8 {
		if slices.Contains(names, name) {
			t.Errorf("a fresh install has %s, which migration 8 drops", name)
		}
	}
	if !slices.Contains(names, requeueableIdx) {
		t.Errorf("a fresh install lacks %s: %v", requeueableIdx, names)
	}

	url, conn := freshDB(t)
	if err := migrate.UpWith(ctx, url, migrate.Config{Version: 7}); err != nil {
		t.Fatal(err)
	}
	if v, err := migrate.CurrentVersion(ctx, url); err != nil || v != 7 {
		t.Fatalf("UpWith Version 7 applied up to %d (%v)", v, err)
	}
	v7 := snapshot(t, conn)
	for _, name := range droppedBy8 {
		if !strings.Contains(v7, "owned 1 index external_integration_outbox."+name) {
			t.Errorf("an install at 7 does not own %s", name)
		}
	}
	if _, err := conn.Exec(ctx, `insert into external_integration_outbox (organization_id, status, idempotency_key)
		values (gen_random_uuid(), 'queued', 'k1'), (gen_random_uuid(), 'failed', null)`); err != nil {
		t.Fatal(err)
	}

	if err := migrate.Up(ctx, url); err != nil {
		t.Fatalf("upgrading from 7: %v", err)
	}
	if got := snapshot(t, conn); got != fresh {
		t.Errorf("the upgrade from 7 differs from a fresh install:\n got %s\nwant %s", got, fresh)
	}
	if err := migrate.DownTo(ctx, url, 7); err != nil {
		t.Fatal(err)
	}
	// The down steps of 10 and 11 set the defaults of idempotency_enforced
	// and updated_at back but leave them nullable (NOT NULL again would scan
	// the table under an exclusive lock); the rest is the schema of 7
	// exactly.
	nullable := v7
	for _, c := range []string{"idempotency_enforced boolean NO false", "updated_at timestamp with time zone NO now()"} {
		was := nullable
		nullable = strings.Replace(nullable, "column external_integration_outbox."+c,
			"column external_integration_outbox."+strings.Replace(c, " NO ", " YES ", 1), 1)
		if nullable == was {
			t.Fatalf("the schema of 7 has no NOT NULL %s:\n%s", c, v7)
		}
	}
	if got := snapshot(t, conn); got != nullable {
		t.Errorf("the down steps to 7 do not restore the schema of 7:\n got %s\nwant %s", got, nullable)
	}
	if err := migrate.Up(ctx, url); err != nil {
		t.Fatal(err)
	}
	if got := snapshot(t, conn); got != fresh {
		t.Errorf("up again differs from a fresh install:\n got %s\nwant %s", got, fresh)
	}
	if n := countRowsConn(t, conn, `select count(*) from external_integration_outbox`); n != 2 {
		t.Errorf("the host's outbox has %d rows, want its 2", n)
	}
}

// An index of one of the dropped names that the host created itself was
// never recorded as ours: neither migration 8 nor any down step drops it.
func TestMigration8LeavesTheHostsOwnIndexOfADroppedName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := freshDB(t)
	if err := migrate.Up(ctx, url); err != nil {
		t.Fatal(err)
	}
	migrateDownToZero(ctx, t, url)
	// The host's own index, named like migration 1's and defined like it.
	if _, err := conn.Exec(ctx, `create index external_integration_outbox_claimable_idx
		on external_integration_outbox (created_at) where status in ('queued', 'failed')`); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name string
		run  func() error
	}{
		{"up to 7", func() error { return migrate.UpWith(ctx, url, migrate.Config{Version: 7}) }},
		{"up to 8", func() error { return migrate.Up(ctx, url) }},
		{"down to 7", func() error { return migrate.DownTo(ctx, url, 7) }},
		{"up to 8 again", func() error { return migrate.Up(ctx, url) }},
		{"down to 0", func() error { return migrate.DownTo(ctx, url, 0) }},
	} {
		if err := step.run(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if !slices.Contains(outboxIndexNames(t, conn), "external_integration_outbox_claimable_idx") {
			t.Fatalf("after %s the host's own claimable_idx is gone", step.name)
		}
		if n := countRowsConn(t, conn, `select count(*) from pg_class where relname = 'integration_outbox_owned_objects'`); n == 1 &&
			countRowsConn(t, conn, `select count(*) from integration_outbox_owned_objects
				where object_name = 'external_integration_outbox_claimable_idx'`) != 0 {
			t.Errorf("after %s the host's claimable_idx is recorded as ours", step.name)
		}
	}
}

// Every index a fresh install owns on the host's tables is named in
// docs/architecture.md (with the statement that reads it), and no dropped
// one is listed as ours in docs/deploy.md.
func TestEveryIndexOfOursIsNamedInTheArchitecture(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := freshDB(t)
	if err := migrate.Up(ctx, url); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, `select object_name from integration_outbox_owned_objects where kind = 'index' order by object_name`)
	if err != nil {
		t.Fatal(err)
	}
	owned, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(owned) < 8 {
		t.Fatalf("a fresh install owns %d indexes: %v", len(owned), owned)
	}
	arch, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	deploy, err := os.ReadFile("../../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range owned {
		short := strings.TrimPrefix(name, "external_integration_")
		if !strings.Contains(string(arch), "| `"+short+"`") {
			t.Errorf("docs/architecture.md has no row for %s", name)
		}
	}
	for _, name := range droppedBy8 {
		if strings.Contains(string(arch), "| `"+strings.TrimPrefix(name, "external_integration_")+"`") {
			t.Errorf("docs/architecture.md lists %s, which migration 8 drops, as ours", name)
		}
	}
	if !strings.Contains(string(deploy), "`_org_requeueable_idx`") {
		t.Error("docs/deploy.md does not list the requeueable tenant index among ours")
	}
}
