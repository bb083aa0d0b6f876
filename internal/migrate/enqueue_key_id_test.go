package migrate_test

import (
	"context"
	_ "embed"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"integration-outbox/internal/migrate"
	"integration-outbox/internal/testenv"
)

// enqueueBefore25 is the enqueue function's file as migrations 2 to 22
// applied it before migration 25 (rows of a random id, kept unique by the
// key index alone): the body every install at 22 to 24 runs when it
// upgrades.
//
//go:embed testdata/enqueue-before-25.sql
var enqueueBefore25 string

// installEnqueueBefore25 puts that body in place, as an install at 24 had it.
func installEnqueueBefore25(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	body := strings.NewReplacer("{{.Outbox}}", "public.external_integration_outbox",
		"{{.Connections}}", "public.integration_connections", "{{.Schema}}", "public").Replace(enqueueBefore25)
	if _, err := conn.Exec(context.Background(), body); err != nil {
		t.Fatal(err)
	}
}

// at24WithTheEarlierBody is a fresh install at 24 with the function's body
// from before migration 25 in place, as an install at 24 had it, and a
// webhook connection of org: what enqueues a key through it.
func at24WithTheEarlierBody(t *testing.T, org string) (string, *pgx.Conn, func(key string) enqueueArgs) {
	t.Helper()
	url, conn := freshDB(t)
	return url, conn, upTo24WithTheEarlierBody(t, url, conn, org)
}

// upTo24WithTheEarlierBody migrates the fresh database at url to 24, puts
// the function's body from before migration 25 in place and makes a
// webhook connection of org: what enqueues a key through it.
func upTo24WithTheEarlierBody(t *testing.T, url string, conn *pgx.Conn, org string) func(key string) enqueueArgs {
	t.Helper()
	if err := migrate.UpWith(context.Background(), url, migrate.Config{Version: 24}); err != nil {
		t.Fatal(err)
	}
	installEnqueueBefore25(t, conn)
	_, args := webhookConnection(t, conn, org)
	return args
}

// checkGaveUp checks what a run of migration 25 that gave up leaves: the
// schema at 24 and the function keeping keys in the key index.
func checkGaveUp(t *testing.T, url string, conn *pgx.Conn) {
	t.Helper()
	if v, err := migrate.CurrentVersion(context.Background(), url); err != nil || v != 24 {
		t.Errorf("after the failed run the schema is at %d (%v), want 24", v, err)
	}
	if keepsKeysByID(t, conn) {
		t.Error("the function keeps keys by id although the migration gave up")
	}
}

// checkNextRunCompletes runs make migrate again and checks that it
// completed migration 25.
func checkNextRunCompletes(t *testing.T, url string, conn *pgx.Conn) {
	t.Helper()
	if err := migrate.Up(context.Background(), url); err != nil {
		t.Fatal(err)
	}
	if !keepsKeysByID(t, conn) {
		t.Error("the next run did not complete migration 25")
	}
}

// connect is a connection of its own to url, closed when the test ends.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// keepsKeysByID says whether the installed function keeps keys by id alone
// (migration 25's body) rather than in the key index.
func keepsKeysByID(t *testing.T, conn *pgx.Conn) bool {
	t.Helper()
	return strings.Contains(enqueueBody(t, conn), "on conflict (id) do nothing")
}

// An install upgraded while the host calls the function: a transaction
// still running the earlier body (a random id, the key index) when migration
// 25 starts enqueues a key, and a later call enqueues the same key before it
// commits. The migration waits for that transaction before the function
// stops writing the key index, so the later call waits for it on the key
// index and returns its row: one row. Without the wait (the function keeping
// keys by id at once) the later call inserted a second row.
func TestMigration25WaitsForTheEarlierBodysCallsBeforeItStopsWritingTheKeyIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	org := "6f1a4c1e-0000-4000-8000-0000000000f1"
	url, conn, args := at24WithTheEarlierBody(t, org)

	earlyTx, err := connect(t, url).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer earlyTx.Rollback(ctx)
	earlyID := mustEnqueue(t, earlyTx, args("po-upgrade"))
	if earlyID == keyID(org, "po-upgrade") {
		t.Fatalf("the earlier body gave the key's id %s: not the body of before 25", earlyID)
	}

	migrated := make(chan error, 1)
	go func() { migrated <- migrate.UpWith(ctx, url, migrate.Config{}) }()
	// Step 1 is in place (the rows enter the key index again with the
	// key's id) while the migration waits for the early transaction.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var transition bool
		if err := conn.QueryRow(ctx, `select prosrc like '%integration_outbox_key_id%' and prosrc not like '%on conflict (id)%'
			from pg_proc where proname = 'integration_outbox_enqueue'`).Scan(&transition); err != nil {
			t.Fatal(err)
		}
		if transition {
			break
		}
		select {
		case err := <-migrated:
			t.Fatalf("the migration ended (%v) before the early transaction did", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("step 1 of migration 25 never came")
		}
		time.Sleep(20 * time.Millisecond)
	}
	late := connect(t, url)
	lateID := make(chan string, 1)
	lateErr := make(chan error, 1)
	go func() {
		id, err := enqueue(ctx, late, args("po-upgrade"))
		lateID <- id
		lateErr <- err
	}()
	time.Sleep(time.Second)
	select {
	case err := <-migrated:
		t.Fatalf("migration 25 ended (%v) while a transaction that ran the earlier body was open", err)
	default:
	}
	if err := earlyTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if id, err := <-lateID, <-lateErr; err != nil || id != earlyID {
		t.Errorf("the later call of the same key: %s %v, want the early row %s", id, err, earlyID)
	}
	if err := <-migrated; err != nil {
		t.Fatal(err)
	}
	if !keepsKeysByID(t, conn) {
		t.Error("after migration 25 the function does not keep keys by id")
	}
	if id, err := enqueue(ctx, conn, args("po-upgrade")); err != nil || id != earlyID {
		t.Errorf("the key again after the migration: %s %v, want the early row %s", id, err, earlyID)
	}
	if n := countRowsConn(t, conn, `select count(*) from external_integration_outbox where idempotency_key = 'po-upgrade'`); n != 1 {
		t.Errorf("%d rows hold the key, want 1", n)
	}
}

// A transaction that may have called the earlier body and does not end:
// migration 25 gives up after its wait, naming the transaction, and leaves
// the function keeping keys in the key index (correct, only not lighter)
// and the schema at 24; once the transaction has ended, make migrate again
// completes it.
func TestMigration25GivesUpOnATransactionThatDoesNotEndAndCompletesOnTheNextRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	org := "6f1a4c1e-0000-4000-8000-0000000000f2"
	url, conn, args := at24WithTheEarlierBody(t, org)
	idleTx, err := connect(t, url).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer idleTx.Rollback(ctx)
	var pid uint32
	if err := idleTx.QueryRow(ctx, `select pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	// It read the outbox, as the earlier body's first statement does.
	if _, err := idleTx.Exec(ctx, `select count(*) from external_integration_outbox`); err != nil {
		t.Fatal(err)
	}

	err = migrate.UpWith(ctx, url, migrate.Config{EnqueueSwitchWait: 2 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "pid "+strconv.FormatUint(uint64(pid), 10)) {
		t.Fatalf("migration 25 with a transaction that stays open: %v, want an error naming pid %d", err, pid)
	}
	checkGaveUp(t, url, conn)
	id := mustEnqueue(t, conn, args("po-meanwhile"))
	if id != keyID(org, "po-meanwhile") || countRowsConn(t, conn, `select count(*) from external_integration_outbox
		where idempotency_key = 'po-meanwhile' and idempotency_enforced`) != 1 {
		t.Errorf("meanwhile a new key is not in the key index under its key's id (%s)", id)
	}

	if err := idleTx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	checkNextRunCompletes(t, url, conn)
	if again := mustEnqueue(t, conn, args("po-meanwhile")); again != id {
		t.Errorf("the key enqueued meanwhile, again: %s, want %s", again, id)
	}
}

// A host whose outbox's id has no unique index (nothing in the contract
// promises one): migration 25 keeps the key index, and the function stays
// idempotent there.
func TestMigration25KeepsTheKeyIndexWhereTheOutboxsIDIsNotUnique(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := freshDB(t)
	if err := migrate.UpWith(ctx, url, migrate.Config{Version: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `alter table external_integration_outbox drop constraint external_integration_outbox_pkey`); err != nil {
		t.Fatal(err)
	}
	if err := migrate.Up(ctx, url); err != nil {
		t.Fatal(err)
	}
	if keepsKeysByID(t, conn) {
		t.Fatal("the function keeps keys by id on an outbox whose id is not unique")
	}
	org := "6f1a4c1e-0000-4000-8000-0000000000f3"
	_, args := webhookConnection(t, conn, org)
	id := mustEnqueue(t, conn, args("po-no-pk"))
	if again := mustEnqueue(t, conn, args("po-no-pk")); again != id {
		t.Errorf("the same key again: %s, want %s", again, id)
	}
	if n := countRowsConn(t, conn, `select count(*) from external_integration_outbox
		where idempotency_key = 'po-no-pk' and idempotency_enforced`); n != 1 {
		t.Errorf("%d rows of the key in the key index, want 1", n)
	}
}

// A row whose key the host changed afterwards still holds the id of its
// first key: a call with that first key conflicts with it, finds no row of
// its key, and is refused (23505) naming the key, rather than returning
// another command's row or inserting a second row.
func TestEnqueueRefusesAKeyWhoseIDAnotherKeysRowHolds(t *testing.T) {
	t.Parallel()
	b := setupEnqueue(t)
	ctx := context.Background()
	id := mustEnqueue(t, b.f.Pool, b.args("po-renamed"))
	if _, err := b.f.Pool.Exec(ctx, `update external_integration_outbox set idempotency_key = 'po-renamed-by-host' where id = $1`, id); err != nil {
		t.Fatal(err)
	}
	_, err := enqueue(ctx, b.f.Pool, b.args("po-renamed"))
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" || pgErr.ColumnName != "idempotency_key" || !strings.Contains(pgErr.Message, "po-renamed") {
		t.Errorf("the key whose id another key's row holds: %v, want SQLSTATE 23505 naming idempotency_key and the key", err)
	}
	if n := b.f.Count(t, `select count(*) from external_integration_outbox where organization_id = $1`, b.org); n != 1 {
		t.Errorf("%d rows of the organization, want 1", n)
	}
}

// keyIndexScans is how many scans the key index has had, as the statistics
// read after conn's own are flushed.
func keyIndexScans(t *testing.T, conn *pgx.Conn) int64 {
	t.Helper()
	ctx := context.Background()
	for _, stmt := range []string{`select pg_stat_force_next_flush()`, `select 1`, `select pg_stat_clear_snapshot()`} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	var n int64
	if err := conn.QueryRow(ctx, `select idx_scan from pg_stat_user_indexes
		where indexrelname = 'external_integration_outbox_enqueue_key_idx'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// On an install whose key index holds no row of a random id (a fresh one),
// migration 25 leaves out the function's probe of it: a call reads it no
// more for a new key (a repeated one still looks its row up in every
// index). Where such rows are (an upgrade), the probe stays:
// TestMigration25WaitsForTheEarlierBodysCallsBeforeItStopsWritingTheKeyIndex
// finds the early row's key through it.
func TestEnqueueReadsNoKeyIndexOnAFreshInstall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := freshDB(t)
	if err := migrate.Up(ctx, url); err != nil {
		t.Fatal(err)
	}
	org := "6f1a4c1e-0000-4000-8000-0000000000f4"
	_, args := webhookConnection(t, conn, org)
	before := keyIndexScans(t, conn)
	for _, key := range []string{"po-a", "po-b", "po-c"} {
		mustEnqueue(t, conn, args(key))
	}
	if after := keyIndexScans(t, conn); after != before {
		t.Errorf("three new keys scanned the key index %d times, want none", after-before)
	}
}

// enqueueBody is the installed function's body.
func enqueueBody(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var body string
	if err := conn.QueryRow(context.Background(), `select prosrc from pg_proc
		where proname = 'integration_outbox_enqueue'`).Scan(&body); err != nil {
		t.Fatal(err)
	}
	return body
}

// probesHostKeys says whether body probes the legacy key index (the host's
// keyed rows from before migration 10) before it inserts.
func probesHostKeys(body string) bool {
	return strings.Contains(body, "and not o.idempotency_enforced and o.idempotency_key is not null)")
}

// insertReadsConnection says whether body's insert reads the connection
// itself (migration 26's one statement a call).
func insertReadsConnection(body string) bool {
	return strings.Contains(body, "'queued', 0, now(), v_created_at\n    from public.integration_connections c")
}

// Migration 26 decides the function's probes again. At 25 an install whose
// outbox held one of the host's keyed rows from before migration 10 probes
// the legacy key index at every call (and honours that key); once retention
// has deleted the row, migration 26 leaves the probe out. The call is one
// statement (its insert reads the connection); the tenant check and the key
// stay what they were.
func TestMigration26DropsTheProbesOfKeyIndexesRetentionEmptied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := freshDB(t)
	if err := migrate.UpWith(ctx, url, migrate.Config{Version: 9}); err != nil {
		t.Fatal(err)
	}
	org := "6f1a4c1e-0000-4000-8000-0000000000f5"
	connID, args := webhookConnection(t, conn, org)
	var hostRow string
	if err := conn.QueryRow(ctx, `insert into external_integration_outbox (organization_id, integration_connection_id,
		provider, command_type, local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count)
		values ($1, $2, 'webhook', 'push_purchase_order', 'purchase_order', $1, '{}', 'po-host-old', 'completed', 1)
		returning id::text`, org, connID).Scan(&hostRow); err != nil {
		t.Fatal(err)
	}
	if err := migrate.UpWith(ctx, url, migrate.Config{Version: 25}); err != nil {
		t.Fatal(err)
	}
	if !probesHostKeys(enqueueBody(t, conn)) {
		t.Fatal("at 25 with a host row from before migration 10, the function does not probe the legacy key index")
	}
	if got := mustEnqueue(t, conn, args("po-host-old")); got != hostRow {
		t.Fatalf("at 25, the host row's key: %s, want the host row %s", got, hostRow)
	}
	if _, err := conn.Exec(ctx, `delete from external_integration_outbox where id = $1`, hostRow); err != nil {
		t.Fatal(err)
	}
	if err := migrate.Up(ctx, url); err != nil {
		t.Fatal(err)
	}
	if body := enqueueBody(t, conn); probesHostKeys(body) || !insertReadsConnection(body) {
		t.Fatalf("at 26 with no host row left: probes the legacy key index %v (want false), the insert reads the connection %v (want true)",
			probesHostKeys(body), insertReadsConnection(body))
	}
	before := keyIndexScans(t, conn)
	id := mustEnqueue(t, conn, args("po-after-26"))
	if after := keyIndexScans(t, conn); after != before {
		t.Errorf("a new key scanned the key index %d times, want none", after-before)
	}
	if again := mustEnqueue(t, conn, args("po-after-26")); again != id {
		t.Errorf("the same key again: %s, want %s", again, id)
	}
	otherOrg := "6f1a4c1e-0000-4000-8000-0000000000f6"
	for _, a := range []enqueueArgs{
		{otherOrg, connID, "push_purchase_order", "purchase_order", otherOrg, `{}`, "po-after-26"},
		{otherOrg, connID, "push_purchase_order", "purchase_order", otherOrg, `{}`, "po-other-org"},
	} {
		_, err := enqueue(ctx, conn, a)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23503" || pgErr.ColumnName != "integration_connection_id" {
			t.Errorf("another organization's connection, key %s: %v, want SQLSTATE 23503 naming integration_connection_id", a[6], err)
		}
	}
	if n := countRowsConn(t, conn, `select count(*) from external_integration_outbox`); n != 1 {
		t.Errorf("%d rows, want 1", n)
	}
}

// Every make migrate run at the last migration decides the probes again,
// as migration 26 did: while the host's keyed row from before migration 10
// is there the function probes the legacy key index, and a run leaves the
// function as it is (no new body, so no session compiles it again); once
// retention has deleted the row, the next run applies the body without the
// probe, and the call still keeps its key.
func TestEveryRunDropsAProbeOnceRetentionEmptiedItsIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := freshDB(t)
	if err := migrate.UpWith(ctx, url, migrate.Config{Version: 9}); err != nil {
		t.Fatal(err)
	}
	org := "6f1a4c1e-0000-4000-8000-0000000000f7"
	_, args := webhookConnection(t, conn, org)
	var hostRow string
	if err := conn.QueryRow(ctx, `insert into external_integration_outbox (organization_id, integration_connection_id,
		provider, command_type, local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count)
		select $1, c.id, 'webhook', 'push_purchase_order', 'purchase_order', $1, '{}', 'po-host-old', 'completed', 1
		from integration_connections c where c.organization_id = $1
		returning id::text`, org).Scan(&hostRow); err != nil {
		t.Fatal(err)
	}
	version := func() string {
		t.Helper()
		var xmin string
		if err := conn.QueryRow(ctx, `select xmin::text from pg_proc where proname = 'integration_outbox_enqueue'`).Scan(&xmin); err != nil {
			t.Fatal(err)
		}
		return xmin
	}
	if err := migrate.Up(ctx, url); err != nil {
		t.Fatal(err)
	}
	if !probesHostKeys(enqueueBody(t, conn)) {
		t.Fatal("at the last migration with a host row from before migration 10, the function does not probe the legacy key index")
	}
	installed := version()
	if err := migrate.Up(ctx, url); err != nil {
		t.Fatal(err)
	}
	if !probesHostKeys(enqueueBody(t, conn)) || version() != installed {
		t.Fatalf("a run with the host row still there: probes %v (want true), function replaced %v (want false)",
			probesHostKeys(enqueueBody(t, conn)), version() != installed)
	}
	if got := mustEnqueue(t, conn, args("po-host-old")); got != hostRow {
		t.Fatalf("the host row's key: %s, want the host row %s", got, hostRow)
	}
	if _, err := conn.Exec(ctx, `delete from external_integration_outbox where id = $1`, hostRow); err != nil {
		t.Fatal(err)
	}
	if err := migrate.Up(ctx, url); err != nil {
		t.Fatal(err)
	}
	if body := enqueueBody(t, conn); probesHostKeys(body) || !insertReadsConnection(body) {
		t.Fatalf("a run after retention deleted the host row: probes %v (want false), the insert reads the connection %v (want true)",
			probesHostKeys(body), insertReadsConnection(body))
	}
	id := mustEnqueue(t, conn, args("po-after-retention"))
	if again := mustEnqueue(t, conn, args("po-after-retention")); again != id {
		t.Errorf("the same key again: %s, want %s", again, id)
	}
	if n := countRowsConn(t, conn, `select count(*) from external_integration_outbox`); n != 1 {
		t.Errorf("%d rows, want 1", n)
	}
}

// A transaction that called the earlier body and was prepared (two-phase
// commit: it has no backend left, only its locks and its row) when
// migration 25 starts: the migration waits for it as for a running one,
// gives up after its wait naming it, and leaves the function keeping keys in
// the key index. Once it is committed the next run completes migration 25,
// and the function returns its row for its key: one row.
//
// The test server runs with max_prepared_transactions = 0 (PostgreSQL's
// default), which refuses PREPARE TRANSACTION, so this test starts a server
// of its own that allows them.
func TestMigration25WaitsForAPreparedTransactionThatCalledTheEarlierBody(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	server, err := testenv.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(server.Stop)
	server.Settings = []string{"max_prepared_transactions=4"}
	if err := server.Restart(); err != nil {
		t.Fatalf("restarting the test's server with prepared transactions allowed: %v", err)
	}
	url, err := server.CreateDatabase(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, url)
	var allowed int
	if err := conn.QueryRow(ctx, `select current_setting('max_prepared_transactions')::int`).Scan(&allowed); err != nil {
		t.Fatal(err)
	}
	if allowed == 0 {
		// TEST_DATABASE_URL names a server of its own, which the test
		// cannot restart.
		t.Skip("the server at TEST_DATABASE_URL runs with max_prepared_transactions = 0")
	}
	args := upTo24WithTheEarlierBody(t, url, conn, "6f1a4c1e-0000-4000-8000-0000000000f5")

	held := connect(t, url)
	tx, err := held.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := mustEnqueue(t, tx, args("po-prepared"))
	if _, err := tx.Exec(ctx, `prepare transaction 'enqueue-held'`); err != nil {
		t.Fatal(err)
	}
	// PREPARE TRANSACTION ended the session's transaction; the pgx.Tx is
	// spent, its rollback a no-op on the server.
	_ = tx.Rollback(ctx)
	committed := false
	t.Cleanup(func() {
		if !committed {
			_, _ = held.Exec(context.Background(), `rollback prepared 'enqueue-held'`)
		}
	})

	err = migrate.UpWith(ctx, url, migrate.Config{EnqueueSwitchWait: 2 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "prepared transaction 'enqueue-held'") {
		t.Fatalf("migration 25 with a prepared transaction: %v, want an error naming it", err)
	}
	checkGaveUp(t, url, conn)

	if _, err := held.Exec(ctx, `commit prepared 'enqueue-held'`); err != nil {
		t.Fatal(err)
	}
	committed = true
	checkNextRunCompletes(t, url, conn)
	if again := mustEnqueue(t, conn, args("po-prepared")); again != first {
		t.Errorf("the prepared transaction's key, enqueued again: %s, want its row %s", again, first)
	}
	if n := countRowsConn(t, conn, `select count(*) from external_integration_outbox where idempotency_key = 'po-prepared'`); n != 1 {
		t.Errorf("%d rows hold the prepared transaction's key, want 1", n)
	}
}
