package migrate_test

import (
	"context"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/migrate"
	"integration-outbox/migrations"
)

// hostTables are the host application's tables: no down step may drop them or
// a column they held before our migrations ran.
var hostTables = []string{
	"external_integration_outbox", "integration_connections", "purchase_orders",
	"purchase_order_lines", "external_integration_conflicts",
}

// hostSchema is a back office that created its tables before we migrate, with
// columns and an index of its own that our migrations also name (with the types and
// definition ours would have, so they stay the host's): updated_at on
// the outbox, resolved_at on conflicts, external_integration_conflicts_org_idx.
const hostSchema = `
create table integration_connections (
    id uuid primary key, organization_id uuid not null, location_id uuid, provider text not null,
    credential_reference text, config_json jsonb not null default '{}', created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(), display_name text);
create table purchase_orders (
    id uuid primary key, organization_id uuid not null, location_id uuid, supplier_id uuid, order_number text,
    status text, currency_code text, created_at timestamptz not null default now(), updated_at timestamptz not null default now());
create table purchase_order_lines (
    id uuid primary key, purchase_order_id uuid not null references purchase_orders (id), stock_item_id uuid,
    ordered_quantity numeric, purchase_unit_code text, normalized_unit_code text,
    units_per_purchase_unit_snapshot numeric, unit_price_minor_snapshot bigint, created_at timestamptz not null default now());
create table external_integration_outbox (
    id uuid primary key default gen_random_uuid(), organization_id uuid not null, integration_connection_id uuid not null,
    provider text not null, command_type text not null, local_entity_type text not null, local_entity_id uuid not null,
    payload_json jsonb not null default '{}', idempotency_key text not null, status text not null default 'queued',
    attempt_count int not null default 0, next_attempt_at timestamptz, last_error text, provider_reference text,
    provider_status text, completed_at timestamptz, created_at timestamptz not null default now(),
    updated_at timestamptz);
create table external_integration_conflicts (
    id uuid primary key default gen_random_uuid(), organization_id uuid not null, location_id uuid, integration_connection_id uuid,
    conflict_type text not null, severity text not null default 'high', local_entity_type text, local_entity_id uuid,
    summary text, local_snapshot jsonb, status text not null default 'open', created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(), resolved_at timestamptz);
create index external_integration_conflicts_org_idx on external_integration_conflicts (organization_id, status, created_at);

insert into integration_connections (id, organization_id, provider, credential_reference, display_name)
    values ('00000000-0000-0000-0000-0000000000c1', '00000000-0000-0000-0000-0000000000a1', 'webhook', 'secret-1', 'Supplier hub');
insert into purchase_orders (id, organization_id, order_number, status, currency_code)
    values ('00000000-0000-0000-0000-0000000000b1', '00000000-0000-0000-0000-0000000000a1', 'PO-1', 'sent', 'EUR');
insert into purchase_order_lines (id, purchase_order_id, ordered_quantity, purchase_unit_code, unit_price_minor_snapshot)
    values ('00000000-0000-0000-0000-0000000000d1', '00000000-0000-0000-0000-0000000000b1', 3, 'case', 1250),
           ('00000000-0000-0000-0000-0000000000d2', '00000000-0000-0000-0000-0000000000b1', 1, 'each', 99);
insert into external_integration_outbox (id, organization_id, integration_connection_id, provider, command_type,
    local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count, last_error, updated_at)
    values ('00000000-0000-0000-0000-0000000000e1', '00000000-0000-0000-0000-0000000000a1',
            '00000000-0000-0000-0000-0000000000c1', 'webhook', 'push_purchase_order', 'purchase_order',
            '00000000-0000-0000-0000-0000000000b1', '{"orderNumber": "PO-1"}', 'po-1', 'queued', 0, null,
            '2026-01-02 03:04:05+00'),
           ('00000000-0000-0000-0000-0000000000e2', '00000000-0000-0000-0000-0000000000a1',
            '00000000-0000-0000-0000-0000000000c1', 'webhook', 'push_purchase_order', 'purchase_order',
            '00000000-0000-0000-0000-0000000000b1', '{}', 'po-1-retry', 'failed', 2, 'provider timeout', null);
insert into external_integration_conflicts (id, organization_id, conflict_type, summary, status, resolved_at)
    values ('00000000-0000-0000-0000-0000000000f1', '00000000-0000-0000-0000-0000000000a1', 'provider_rejected',
            'rejected by the supplier', 'resolved', '2026-01-03 00:00:00+00');`

type column struct {
	name, dataType, nullable, defaultExpr string
}

func tableColumns(t *testing.T, conn *pgx.Conn, table string) []column {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
		select column_name, data_type, is_nullable, coalesce(column_default, '')
		from information_schema.columns where table_schema = current_schema() and table_name = $1
		order by column_name`, table)
	if err != nil {
		t.Fatal(err)
	}
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		err := r.Scan(&c.name, &c.dataType, &c.nullable, &c.defaultExpr)
		return c, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return cols
}

func tableIndexes(t *testing.T, conn *pgx.Conn, table string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
		select indexname || ': ' || indexdef from pg_indexes
		where schemaname = current_schema() and tablename = $1 order by indexname`, table)
	if err != nil {
		t.Fatal(err)
	}
	defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return defs
}

// hostState is every host table's columns, indexes and rows (the values of the
// given columns, as JSON ordered by id).
type hostState struct {
	columns map[string][]column
	indexes map[string][]string
	rows    map[string]string
}

func captureHost(t *testing.T, conn *pgx.Conn, hostColumns map[string][]column) hostState {
	t.Helper()
	s := hostState{columns: map[string][]column{}, indexes: map[string][]string{}, rows: map[string]string{}}
	for _, table := range hostTables {
		s.columns[table] = tableColumns(t, conn, table)
		s.indexes[table] = tableIndexes(t, conn, table)
		names := make([]string, 0, len(hostColumns[table]))
		for _, c := range hostColumns[table] {
			names = append(names, pgx.Identifier{c.name}.Sanitize())
		}
		var rows string
		q := fmt.Sprintf(`select coalesce(jsonb_agg(to_jsonb(t) order by t.id), '[]')::text from (select %s from %s) t`,
			strings.Join(names, ", "), pgx.Identifier{table}.Sanitize())
		if err := conn.QueryRow(context.Background(), q).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		s.rows[table] = rows
	}
	return s
}

func migrationCount(t *testing.T) int {
	t.Helper()
	files, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	return len(files) + len(migrations.Go)
}

func downToZero(ctx context.Context, t *testing.T, url string, conn *pgx.Conn) {
	t.Helper()
	for range migrationCount(t) {
		if err := migrate.Down(ctx, url); err != nil {
			t.Fatal(err)
		}
	}
	var version int64
	if err := conn.QueryRow(ctx, `select coalesce(max(version_id), 0) from `+migrate.VersionTable).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version != 0 {
		t.Fatalf("after every down step the schema is at version %d, want 0", version)
	}
}

// A back office that created its tables (with an updated_at, a resolved_at and
// an index of its own) and rows in all five: up, down to zero and up again
// leave every host row, column and index exactly as the host had them.
func TestHostRowsAndColumnsSurviveUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := freshDB(t)
	if _, err := conn.Exec(ctx, hostSchema); err != nil {
		t.Fatal(err)
	}
	hostColumns := map[string][]column{}
	for _, table := range hostTables {
		hostColumns[table] = tableColumns(t, conn, table)
	}
	before := captureHost(t, conn, hostColumns)

	if err := migrate.Up(ctx, url); err != nil {
		t.Fatal(err)
	}
	afterUp := captureHost(t, conn, hostColumns)
	if !slices.ContainsFunc(afterUp.columns["external_integration_outbox"], func(c column) bool { return c.name == "claim_token" }) {
		t.Fatal("up did not add claim_token to the host's outbox")
	}
	for _, table := range hostTables {
		if afterUp.rows[table] != before.rows[table] {
			t.Errorf("up changed %s rows:\n got %s\nwant %s", table, afterUp.rows[table], before.rows[table])
		}
		for _, c := range hostColumns[table] {
			if table == "external_integration_outbox" && c.name == "created_at" && c.defaultExpr == "now()" {
				// The one change up makes to a host column: its default, now(),
				// becomes the time of the insert (migration 12).
				c.defaultExpr = "clock_timestamp()"
			}
			if !slices.Contains(afterUp.columns[table], c) {
				t.Errorf("up changed the host's column %s.%s (%+v)", table, c.name, c)
			}
		}
	}

	downToZero(ctx, t, url, conn)
	afterDown := captureHost(t, conn, hostColumns)
	for _, table := range hostTables {
		if afterDown.rows[table] != before.rows[table] {
			t.Errorf("down changed %s rows:\n got %s\nwant %s", table, afterDown.rows[table], before.rows[table])
		}
		if !slices.Equal(afterDown.columns[table], before.columns[table]) {
			t.Errorf("down left %s with columns\n%+v\nwant the host's\n%+v", table, afterDown.columns[table], before.columns[table])
		}
		if !slices.Equal(afterDown.indexes[table], before.indexes[table]) {
			t.Errorf("down left %s with indexes\n%q\nwant the host's\n%q", table, afterDown.indexes[table], before.indexes[table])
		}
	}
	var constraints int
	if err := conn.QueryRow(ctx, `select count(*) from pg_constraint
		where conrelid = 'external_integration_outbox'::regclass and contype = 'c'`).Scan(&constraints); err != nil {
		t.Fatal(err)
	}
	if constraints != 0 {
		t.Errorf("down left %d check constraints on the outbox, the host had none", constraints)
	}

	if err := migrate.Up(ctx, url); err != nil {
		t.Fatal(err)
	}
	again := captureHost(t, conn, hostColumns)
	for _, table := range hostTables {
		if again.rows[table] != before.rows[table] {
			t.Errorf("up after down changed %s rows:\n got %s\nwant %s", table, again.rows[table], before.rows[table])
		}
		if !slices.Equal(again.columns[table], afterUp.columns[table]) {
			t.Errorf("up after down gave %s columns\n%+v\nwant\n%+v", table, again.columns[table], afterUp.columns[table])
		}
	}
	// The leased row is claimable again: our columns are back on host rows.
	var claimable int
	if err := conn.QueryRow(ctx, `select count(*) from external_integration_outbox
		where status in ('queued', 'failed') and claim_token is null`).Scan(&claimable); err != nil {
		t.Fatal(err)
	}
	if claimable != 2 {
		t.Errorf("claimable host rows after up/down/up = %d, want 2", claimable)
	}
}

// On an empty database up creates the stand-in of the host tables; down to
// zero keeps them (and their rows) and removes every object of ours.
func TestDownKeepsStandInHostTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := freshDB(t)
	if err := migrate.Up(ctx, url); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `
		insert into integration_connections (organization_id, provider) values (gen_random_uuid(), 'webhook');
		insert into external_integration_outbox (organization_id, status) values (gen_random_uuid(), 'queued');`); err != nil {
		t.Fatal(err)
	}
	downToZero(ctx, t, url, conn)

	for _, table := range hostTables {
		if len(tableColumns(t, conn, table)) == 0 {
			t.Errorf("down dropped the host table %s", table)
		}
	}
	for _, table := range []string{"integration_connections", "external_integration_outbox"} {
		var n int
		if err := conn.QueryRow(ctx, `select count(*) from `+table).Scan(&n); err != nil || n != 1 {
			t.Errorf("%s has %d rows after down (err %v), want 1", table, n, err)
		}
	}
	outboxColumns := tableColumns(t, conn, "external_integration_outbox")
	for _, ours := range []string{"claim_token", "claimed_at", "lease_expires_at", "started_at", "updated_at"} {
		if slices.ContainsFunc(outboxColumns, func(c column) bool { return c.name == ours }) {
			t.Errorf("down left our column external_integration_outbox.%s", ours)
		}
	}
	conflictColumns := tableColumns(t, conn, "external_integration_conflicts")
	for _, ours := range []string{"outbox_id", "resolved_at", "resolution_reason"} {
		if slices.ContainsFunc(conflictColumns, func(c column) bool { return c.name == ours }) {
			t.Errorf("down left our column external_integration_conflicts.%s", ours)
		}
	}
	if got := tableIndexes(t, conn, "purchase_order_lines"); len(got) != 2 {
		t.Errorf("purchase_order_lines indexes after down = %q, want its primary key and purchase_order_lines_purchase_order_id_idx", got)
	}
	var leftovers []string
	rows, err := conn.Query(ctx, `
		select relname from pg_class where relnamespace = current_schema()::regnamespace
		    and relname like any (array['external_integration_rerun_audit%', 'integration_outbox_owned%', 'external_integration_outbox\_%idx'])
		union all
		select proname from pg_proc where pronamespace = current_schema()::regnamespace and proname like 'integration_outbox_%'`)
	if err != nil {
		t.Fatal(err)
	}
	if leftovers, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(leftovers) != 0 {
		t.Errorf("down left objects of ours: %q", leftovers)
	}
	if err := migrate.Up(ctx, url); err != nil {
		t.Fatalf("up after down: %v", err)
	}
}

var (
	goosePragma  = regexp.MustCompile(`(?m)^--\s*\+goose\s+(Up|Down)\b.*$`)
	lineComment  = regexp.MustCompile(`--[^\n]*`)
	dropTable    = regexp.MustCompile(`\bdrop\s+table\s+(?:if\s+exists\s+)?([^;]+)`)
	truncate     = regexp.MustCompile(`\btruncate\s+(?:table\s+)?(?:only\s+)?([^;]+)`)
	deleteFrom   = regexp.MustCompile(`\bdelete\s+from\s+(?:only\s+)?([\w."]+)`)
	alterTable   = regexp.MustCompile(`\balter\s+table\s+(?:if\s+exists\s+)?(?:only\s+)?([\w."]+)\s+([^;]+)`)
	dropColumn   = regexp.MustCompile(`\bdrop\s+(?:column\s+)?(?:if\s+exists\s+)?([\w"]+)`)
	addColumn    = regexp.MustCompile(`\badd\s+(?:column\s+)?(if\s+not\s+exists\s+)?([\w"]+)`)
	dropSuffixes = regexp.MustCompile(`\s+(cascade|restrict)\s*$`)
)

// sections splits a goose SQL file into its Up and Down text, comments removed
// and lower-cased.
func sections(sql string) (up, down string) {
	parts := goosePragma.FindAllStringSubmatchIndex(sql, -1)
	for i, p := range parts {
		end := len(sql)
		if i+1 < len(parts) {
			end = parts[i+1][0]
		}
		body := strings.ToLower(lineComment.ReplaceAllString(sql[p[1]:end], ""))
		if sql[p[2]:p[3]] == "Up" {
			up += body
		} else {
			down += body
		}
	}
	return up, down
}

func bareName(name string) string {
	name = strings.Trim(strings.TrimSpace(name), `"`)
	if i := strings.LastIndex(name, "."); i >= 0 {
		name = strings.Trim(name[i+1:], `"`)
	}
	return name
}

// columnsAddedUnconditionally are the (table, column) pairs the up step adds
// with a plain "add column": that fails if the host has the column, so the
// column is certainly ours when the down step runs.
func columnsAddedUnconditionally(up string) map[[2]string]bool {
	out := map[[2]string]bool{}
	for _, m := range alterTable.FindAllStringSubmatch(up, -1) {
		table := bareName(m[1])
		for _, action := range strings.Split(m[2], ",") {
			if a := addColumn.FindStringSubmatch(strings.TrimSpace(action)); a != nil && a[1] == "" &&
				strings.HasPrefix(strings.TrimSpace(action), "add") && bareName(a[2]) != "constraint" {
				out[[2]string{table, bareName(a[2])}] = true
			}
		}
	}
	return out
}

// hostDataDropsInDown lists the statements of a migration's down step that
// would destroy host data: dropping or emptying a host table, or dropping a
// column of a host table that the up step did not provably create.
func hostDataDropsInDown(sql string) []string {
	up, down := sections(sql)
	isHost := func(name string) bool { return slices.Contains(hostTables, bareName(name)) }
	var problems []string
	for _, m := range dropTable.FindAllStringSubmatch(down, -1) {
		for _, name := range strings.Split(dropSuffixes.ReplaceAllString(m[1], ""), ",") {
			if isHost(name) {
				problems = append(problems, "drops the host table "+bareName(name))
			}
		}
	}
	for _, m := range truncate.FindAllStringSubmatch(down, -1) {
		for _, name := range strings.Split(dropSuffixes.ReplaceAllString(m[1], ""), ",") {
			if isHost(name) {
				problems = append(problems, "truncates the host table "+bareName(name))
			}
		}
	}
	for _, m := range deleteFrom.FindAllStringSubmatch(down, -1) {
		if isHost(m[1]) {
			problems = append(problems, "deletes rows of the host table "+bareName(m[1]))
		}
	}
	ours := columnsAddedUnconditionally(up)
	for _, m := range alterTable.FindAllStringSubmatch(down, -1) {
		if !isHost(m[1]) {
			continue
		}
		table := bareName(m[1])
		for _, action := range strings.Split(m[2], ",") {
			action = strings.TrimSpace(action)
			if !strings.HasPrefix(action, "drop") || strings.HasPrefix(action, "drop constraint") ||
				strings.HasPrefix(action, "drop default") || strings.HasPrefix(action, "drop not null") {
				continue
			}
			d := dropColumn.FindStringSubmatch(action)
			if d != nil && !ours[[2]string{table, bareName(d[1])}] {
				problems = append(problems, fmt.Sprintf(
					"drops the column %s.%s, which the host may have had: add it with integration_outbox_own_column and drop it with integration_outbox_drop_owned",
					table, bareName(d[1])))
			}
		}
	}
	return problems
}

// Every migration, today's and any added later, keeps host tables, their rows
// and the host's columns in its down step.
func TestDownStepsNeverDropHostData(t *testing.T) {
	t.Parallel()
	files, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no migrations embedded")
	}
	for _, name := range files {
		sql, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		if _, down := sections(string(sql)); strings.TrimSpace(down) == "" {
			t.Errorf("%s has no -- +goose Down section", name)
		}
		for _, p := range hostDataDropsInDown(string(sql)) {
			t.Errorf("%s: down step %s", name, p)
		}
	}
}

func TestDownStepCheckRefusesHostDrops(t *testing.T) {
	t.Parallel()
	bad := map[string]string{
		"drop table":           "-- +goose Up\nselect 1;\n-- +goose Down\ndrop table if exists external_integration_outbox;\n",
		"drop table list":      "-- +goose Up\nselect 1;\n-- +goose Down\nDROP TABLE our_table, public.\"purchase_orders\" CASCADE;\n",
		"truncate":             "-- +goose Up\nselect 1;\n-- +goose Down\ntruncate integration_connections;\n",
		"delete":               "-- +goose Up\nselect 1;\n-- +goose Down\ndelete from purchase_order_lines where true;\n",
		"conditional column":   "-- +goose Up\nalter table external_integration_outbox add column if not exists updated_at timestamptz;\n-- +goose Down\nalter table external_integration_outbox drop column updated_at;\n",
		"host column":          "-- +goose Up\nselect 1;\n-- +goose Down\nalter table if exists external_integration_conflicts drop column if exists status;\n",
		"second action column": "-- +goose Up\nselect 1;\n-- +goose Down\nalter table integration_connections drop constraint x, drop column config_json;\n",
	}
	for name, sql := range bad {
		if len(hostDataDropsInDown(sql)) == 0 {
			t.Errorf("%s: the check accepted %q", name, sql)
		}
	}
	good := map[string]string{
		"own table":          "-- +goose Up\ncreate table external_integration_attempts (id int);\n-- +goose Down\ndrop table if exists external_integration_attempts;\n",
		"owned objects":      "-- +goose Up\nselect integration_outbox_own_column(2, 'external_integration_outbox', 'x', 'int');\n-- +goose Down\nselect integration_outbox_drop_owned(2);\n",
		"plain added column": "-- +goose Up\nalter table integration_connections add column circuit_state text;\n-- +goose Down\nalter table integration_connections drop column circuit_state;\n",
		"host table in up":   "-- +goose Up\n-- drop table purchase_orders is never done\nselect 1;\n-- +goose Down\ndrop function if exists f();\n",
	}
	for name, sql := range good {
		if p := hostDataDropsInDown(sql); len(p) != 0 {
			t.Errorf("%s: the check refused %q: %v", name, sql, p)
		}
	}
}
