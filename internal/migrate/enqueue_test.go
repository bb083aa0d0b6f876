package migrate_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"integration-outbox/internal/migrate"
	"integration-outbox/internal/testenv"
)

const enqueueSQL = `select integration_outbox_enqueue($1, $2, $3, $4, $5, $6, $7)::text`

// enqueueArgs are the function's seven arguments, in order; a nil is SQL NULL.
type enqueueArgs [7]any

type enqueueBundle struct {
	f    *testenv.Fixture
	org  string
	conn string
	po   string
}

func setupEnqueue(t *testing.T) enqueueBundle {
	t.Helper()
	f := pg.NewDB(t)
	org := f.NewID(t)
	return enqueueBundle{f: f, org: org,
		conn: f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "webhook"}),
		po:   f.PurchaseOrder(t, org, "", 1)}
}

// webhookConnection inserts a webhook connection of org on conn and returns
// its id and what enqueues a key through it (org stands in for the entity).
func webhookConnection(t *testing.T, conn *pgx.Conn, org string) (string, func(key string) enqueueArgs) {
	t.Helper()
	var connID string
	if err := conn.QueryRow(context.Background(), `insert into integration_connections (organization_id, provider)
		values ($1, 'webhook') returning id::text`, org).Scan(&connID); err != nil {
		t.Fatal(err)
	}
	return connID, func(key string) enqueueArgs {
		return enqueueArgs{org, connID, "push_purchase_order", "purchase_order", org, `{}`, key}
	}
}

func (b enqueueBundle) args(key string) enqueueArgs {
	return enqueueArgs{b.org, b.conn, "push_purchase_order", "purchase_order", b.po,
		`{"externalSupplierId": "SUP-1"}`, key}
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func enqueue(ctx context.Context, q querier, a enqueueArgs) (string, error) {
	var id string
	err := q.QueryRow(ctx, enqueueSQL, a[:]...).Scan(&id)
	return id, err
}

func mustEnqueue(t *testing.T, q querier, a enqueueArgs) string {
	t.Helper()
	id, err := enqueue(context.Background(), q, a)
	if err != nil {
		t.Fatalf("enqueue %v: %v", a, err)
	}
	return id
}

func TestEnqueueInsertsQueuedRowDueNowWithTheConnectionsProvider(t *testing.T) {
	t.Parallel()
	b := setupEnqueue(t)
	id := mustEnqueue(t, b.f.Pool, b.args("po-approved-1"))
	var (
		org, conn, provider, command, entityType, entityID, payload, key, status string
		attempts                                                                 int
		due                                                                      bool
		enforced                                                                 *bool
	)
	err := b.f.Pool.QueryRow(context.Background(), `
		select organization_id::text, integration_connection_id::text, provider, command_type, local_entity_type,
			local_entity_id::text, payload_json::text, idempotency_key, status, attempt_count,
			next_attempt_at <= now() and created_at <= now() and claim_token is null and lease_expires_at is null,
			idempotency_enforced
		from external_integration_outbox where id = $1`, id).Scan(
		&org, &conn, &provider, &command, &entityType, &entityID, &payload, &key, &status, &attempts, &due, &enforced)
	if err != nil {
		t.Fatal(err)
	}
	if org != b.org || conn != b.conn || provider != "webhook" || command != "push_purchase_order" ||
		entityType != "purchase_order" || entityID != b.po || payload != `{"externalSupplierId": "SUP-1"}` ||
		key != "po-approved-1" || status != "queued" || attempts != 0 || !due || enforced != nil {
		t.Errorf("row: org=%s conn=%s provider=%s command=%s entity=%s/%s payload=%s key=%s status=%s attempts=%d due=%v enforced=%v",
			org, conn, provider, command, entityType, entityID, payload, key, status, attempts, due, enforced)
	}
	// The row's id is its key's: the outbox's primary key keeps the key
	// unique, and the row is in neither key index.
	if want := keyID(b.org, "po-approved-1"); id != want {
		t.Errorf("the row's id is %s, want the key's %s", id, want)
	}
	if n := b.f.Count(t, `select count(*) from external_integration_outbox
		where organization_id = $1 and idempotency_key = $2 and idempotency_enforced is not null`, b.org, "po-approved-1"); n != 0 {
		t.Errorf("the row is in a key index (idempotency_enforced not NULL)")
	}
}

// keyID is integration_outbox_key_id worked out here: the first 16 bytes of
// SHA-256 over the organization's 16 bytes and the key's UTF-8, as a UUID
// with its version nibble and its variant nibble 8.
func keyID(org, key string) string {
	u, err := hex.DecodeString(strings.ReplaceAll(org, "-", ""))
	if err != nil || len(u) != 16 {
		panic(fmt.Sprintf("organization %q is not a UUID", org))
	}
	sum := sha256.Sum256(append(u, key...))
	sum[6] = sum[6]&0x0f | 0x80
	sum[8] = sum[8]&0x0f | 0x80
	h := hex.EncodeToString(sum[:16])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func TestEnqueueRefusesBadArgumentsNamingThem(t *testing.T) {
	t.Parallel()
	b := setupEnqueue(t)
	other := b.f.NewID(t)
	otherConn := b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: other})
	names := []string{"organization_id", "integration_connection_id", "command_type", "local_entity_type",
		"local_entity_id", "payload_json", "idempotency_key"}
	type tc struct {
		name   string
		args   enqueueArgs
		code   string
		column string
		text   string
	}
	var cases []tc
	for i, n := range names {
		a := b.args("k-null")
		a[i] = nil
		cases = append(cases, tc{"null " + n, a, "22004", n, n + " must not be null"})
	}
	with := func(i int, v any) enqueueArgs { a := b.args("k-bad"); a[i] = v; return a }
	cases = append(cases,
		tc{"blank command_type", with(2, "  "), "22023", "command_type", "command_type must not be blank"},
		tc{"blank local_entity_type", with(3, ""), "22023", "local_entity_type", "local_entity_type must not be blank"},
		tc{"payload array", with(5, `[{"externalSupplierId": "SUP-1"}]`), "22023", "payload_json", "payload_json must be a JSON object, got a JSON array"},
		tc{"payload string", with(5, `"SUP-1"`), "22023", "payload_json", "payload_json must be a JSON object, got a JSON string"},
		tc{"payload JSON null", with(5, `null`), "22023", "payload_json", "payload_json must be a JSON object, got a JSON null"},
		// Every key the worker refuses: internal/push TestEnqueueKeyRuleIsTheWorkers.
		tc{"empty key", with(6, ""), "22023", "idempotency_key", "idempotency_key must not be empty"},
		tc{"blank key", with(6, " "), "22023", "idempotency_key", "leading or trailing white space"},
		tc{"long key", with(6, strings.Repeat("é", 128)), "22023", "idempotency_key", "is 256 bytes, at most 255"},
		tc{"key with CRLF", with(6, "k\r\nX-Injected: 1"), "22023", "idempotency_key", "contains a control character"},
		tc{"another organization's connection", with(1, otherConn), "23503", "integration_connection_id",
			fmt.Sprintf("integration_connection_id %s is not a connection of organization %s", otherConn, b.org)},
		tc{"missing connection", with(1, other), "23503", "integration_connection_id",
			fmt.Sprintf("integration_connection_id %s is not a connection of organization %s", other, b.org)},
	)
	for _, c := range cases {
		_, err := enqueue(context.Background(), b.f.Pool, c.args)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			t.Errorf("%s: got %v, want a PostgreSQL error", c.name, err)
			continue
		}
		if pgErr.Code != c.code || pgErr.ColumnName != c.column || !strings.Contains(pgErr.Message, c.text) ||
			!strings.HasPrefix(pgErr.Message, "integration_outbox_enqueue: ") {
			t.Errorf("%s: got %s %q (column %q), want %s containing %q (column %q)",
				c.name, pgErr.Code, pgErr.Message, pgErr.ColumnName, c.code, c.text, c.column)
		}
	}
	if n := b.f.Count(t, `select count(*) from external_integration_outbox`); n != 0 {
		t.Errorf("refused calls inserted %d rows", n)
	}
	// The limits are inclusive: a 255-byte key of printable text is fine.
	mustEnqueue(t, b.f.Pool, b.args(strings.Repeat("é", 127)+"k"))
}

func TestEnqueueSameOrganizationAndKeyReturnsTheFirstRow(t *testing.T) {
	t.Parallel()
	b := setupEnqueue(t)
	first := mustEnqueue(t, b.f.Pool, b.args("po-1"))
	again := b.args("po-1")
	again[5] = `{"externalSupplierId": "SUP-2"}` // a later payload does not replace the first
	if id := mustEnqueue(t, b.f.Pool, again); id != first {
		t.Errorf("second call returned %s, want the first row %s", id, first)
	}
	// The key is scoped by organization: another tenant's same key is its own row.
	other := b.f.NewID(t)
	otherArgs := enqueueArgs{other, b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: other}),
		"push_purchase_order", "purchase_order", b.f.PurchaseOrder(t, other, "", 1), `{}`, "po-1"}
	if id := mustEnqueue(t, b.f.Pool, otherArgs); id == first {
		t.Error("another organization's key returned this organization's row")
	}
	if n := b.f.Count(t, `select count(*) from external_integration_outbox where organization_id = $1`, b.org); n != 1 {
		t.Errorf("%d rows for the key, want 1", n)
	}
	if n := b.f.Count(t, `select count(*) from external_integration_outbox
		where id = $1 and payload_json ->> 'externalSupplierId' = 'SUP-1'`, first); n != 1 {
		t.Error("the first row's payload changed")
	}
	// A completed row still holds its key: enqueueing it again is not a new command.
	if _, err := b.f.Pool.Exec(context.Background(),
		`update external_integration_outbox set status = 'completed' where id = $1`, first); err != nil {
		t.Fatal(err)
	}
	if id := mustEnqueue(t, b.f.Pool, b.args("po-1")); id != first {
		t.Errorf("after completion: %s, want %s", id, first)
	}
}

// waitUntilBlocked waits until the backend pid waits on a lock, the state a
// second enqueuer of the same key is in while the first is uncommitted.
func waitUntilBlocked(t *testing.T, pool *pgxpool.Pool, pid uint32) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if n := countRows(t, pool, `select count(*) from pg_stat_activity where pid = $1 and wait_event_type = 'Lock'`, pid); n == 1 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("backend %d never waited on a lock", pid)
}

func countRows(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

type blockedCall struct {
	tx  pgx.Tx
	pid uint32
	id  chan string
	err chan error
}

// startBlockedEnqueue begins a transaction at the isolation level and enqueues
// in it from a goroutine; the result arrives on the channels.
func startBlockedEnqueue(t *testing.T, pool *pgxpool.Pool, iso pgx.TxIsoLevel, a enqueueArgs) *blockedCall {
	t.Helper()
	ctx := context.Background()
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Release)
	tx, err := c.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	call := &blockedCall{tx: tx, pid: c.Conn().PgConn().PID(), id: make(chan string, 1), err: make(chan error, 1)}
	go func() {
		id, err := enqueue(ctx, tx, a)
		call.id <- id
		call.err <- err
	}()
	return call
}

func TestEnqueueConcurrentSameKeyWaitsForTheFirstTransaction(t *testing.T) {
	t.Parallel()
	for _, outcome := range []string{"commit", "rollback"} {
		t.Run("first "+outcome+"s", func(t *testing.T) {
			t.Parallel()
			b := setupEnqueue(t)
			ctx := context.Background()
			first, err := b.f.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer first.Rollback(ctx)
			firstID := mustEnqueue(t, first, b.args("po-race"))
			second := startBlockedEnqueue(t, b.f.Pool, pgx.ReadCommitted, b.args("po-race"))
			waitUntilBlocked(t, b.f.Pool, second.pid)
			if outcome == "commit" {
				err = first.Commit(ctx)
			} else {
				err = first.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			id, err := <-second.id, <-second.err
			if err != nil {
				t.Fatalf("second enqueue: %v", err)
			}
			if err := second.tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if outcome == "commit" && id != firstID {
				t.Errorf("second enqueue returned %s, want the committed %s", id, firstID)
			}
			// After a rollback the second inserts the row: the same id, the
			// key's, now its own.
			if outcome == "rollback" && id != firstID {
				t.Errorf("second enqueue returned %q after the first rolled back, want its own row of the key's id %s", id, firstID)
			}
			if n := b.f.Count(t, `select count(*) from external_integration_outbox where idempotency_key = 'po-race'`); n != 1 {
				t.Errorf("%d rows with the key, want 1", n)
			}
		})
	}
}

func TestEnqueueManyParallelTransactionsInsertOneRow(t *testing.T) {
	t.Parallel()
	b := setupEnqueue(t)
	ctx := context.Background()
	const callers = 16
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		ids = map[string]int{}
	)
	start := make(chan struct{})
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var id string
			err := pgx.BeginFunc(ctx, b.f.Pool, func(tx pgx.Tx) error {
				var err error
				id, err = enqueue(ctx, tx, b.args("po-stampede"))
				if err == nil && i%2 == 0 { // hold the transaction open a little
					_, err = tx.Exec(ctx, `select pg_sleep(0.02)`)
				}
				return err
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("caller %d: %v", i, err)
				return
			}
			ids[id]++
		}()
	}
	close(start)
	wg.Wait()
	if len(ids) != 1 {
		t.Errorf("callers got %d distinct ids %v, want one", len(ids), ids)
	}
	if n := b.f.Count(t, `select count(*) from external_integration_outbox where idempotency_key = 'po-stampede'`); n != 1 {
		t.Errorf("%d rows, want 1", n)
	}
}

// Under REPEATABLE READ (and SERIALIZABLE) the caller's snapshot cannot see a
// row committed after it began: instead of inserting a duplicate, the call
// fails with serialization_failure and a retried transaction gets the row.
func TestEnqueueSnapshotIsolationConflictIsASerializationFailure(t *testing.T) {
	t.Parallel()
	for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		for _, when := range []string{"committed before the call", "committed while the call waits"} {
			t.Run(fmt.Sprintf("%s %s", iso, when), func(t *testing.T) {
				t.Parallel()
				b := setupEnqueue(t)
				ctx := context.Background()
				late, err := b.f.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
				if err != nil {
					t.Fatal(err)
				}
				defer late.Rollback(ctx)
				if _, err := late.Exec(ctx, `select count(*) from purchase_orders`); err != nil { // takes the snapshot
					t.Fatal(err)
				}
				first, err := b.f.Pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer first.Rollback(ctx)
				firstID := mustEnqueue(t, first, b.args("po-snapshot"))
				if when == "committed before the call" {
					if err := first.Commit(ctx); err != nil {
						t.Fatal(err)
					}
					_, err = enqueue(ctx, late, b.args("po-snapshot"))
				} else {
					done := make(chan error, 1)
					var pid uint32
					if err := late.QueryRow(ctx, `select pg_backend_pid()`).Scan(&pid); err != nil {
						t.Fatal(err)
					}
					go func() { _, err := enqueue(ctx, late, b.args("po-snapshot")); done <- err }()
					waitUntilBlocked(t, b.f.Pool, pid)
					if err := first.Commit(ctx); err != nil {
						t.Fatal(err)
					}
					err = <-done
				}
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) || pgErr.Code != "40001" {
					t.Fatalf("enqueue in the older snapshot: %v, want SQLSTATE 40001", err)
				}
				late.Rollback(ctx)
				var retried string
				err = pgx.BeginTxFunc(ctx, b.f.Pool, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
					retried, err = enqueue(ctx, tx, b.args("po-snapshot"))
					return err
				})
				if err != nil || retried != firstID {
					t.Errorf("retry: %s %v, want %s", retried, err, firstID)
				}
				if n := b.f.Count(t, `select count(*) from external_integration_outbox where idempotency_key = 'po-snapshot'`); n != 1 {
					t.Errorf("%d rows, want 1", n)
				}
			})
		}
	}
}

// The host's table may already hold rows, some repeating a key: the migration
// installs without failing, rewriting or changing them, enqueue answers a
// repeated key with its oldest row, and the host's own inserts work as before.
func TestEnqueueInstallsOverHostRowsWithDuplicateKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := freshDB(t)
	org := "6f1a4c1e-0000-4000-8000-000000000001"
	_, err := conn.Exec(ctx, `
		`+seedOutboxTable("external_integration_outbox")+`
		insert into external_integration_outbox (id, organization_id, integration_connection_id, provider, command_type,
			local_entity_type, local_entity_id, idempotency_key, status, created_at)
		values
			('00000000-0000-4000-8000-0000000000b2', '`+org+`', gen_random_uuid(), 'webhook', 'push_purchase_order',
				'purchase_order', gen_random_uuid(), 'dup', 'completed', '2026-01-02'),
			('00000000-0000-4000-8000-0000000000a1', '`+org+`', gen_random_uuid(), 'webhook', 'push_purchase_order',
				'purchase_order', gen_random_uuid(), 'dup', 'failed', '2026-01-01'),
			('00000000-0000-4000-8000-0000000000c3', '`+org+`', gen_random_uuid(), 'webhook', 'push_purchase_order',
				'purchase_order', gen_random_uuid(), 'dup', 'queued', '2026-01-03'),
			('00000000-0000-4000-8000-0000000000d4', '`+org+`', gen_random_uuid(), 'webhook', 'push_purchase_order',
				'purchase_order', gen_random_uuid(), 'single', 'completed', '2026-01-01');`)
	if err != nil {
		t.Fatal(err)
	}
	const snapshot = `select string_agg(t::text, E'\n' order by id) from (
		select id, organization_id, integration_connection_id, provider, command_type, local_entity_type, local_entity_id,
			payload_json, idempotency_key, status, attempt_count, next_attempt_at, last_error, provider_reference,
			provider_status, completed_at, created_at from external_integration_outbox) t`
	var before, after string
	var fileBefore, fileAfter uint32
	if err := conn.QueryRow(ctx, snapshot).Scan(&before); err != nil {
		t.Fatal(err)
	}
	relfile := `select relfilenode from pg_class where oid = 'external_integration_outbox'::regclass`
	if err := conn.QueryRow(ctx, relfile).Scan(&fileBefore); err != nil {
		t.Fatal(err)
	}

	if err := migrate.Up(ctx, url); err != nil {
		t.Fatalf("migrating over duplicate keys: %v", err)
	}
	if err := conn.QueryRow(ctx, snapshot).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, relfile).Scan(&fileAfter); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("host rows changed:\nbefore %s\nafter  %s", before, after)
	}
	if fileAfter != fileBefore {
		t.Errorf("the table was rewritten: relfilenode %d -> %d", fileBefore, fileAfter)
	}

	connID, args := webhookConnection(t, conn, org)
	for range 2 {
		id, err := enqueue(ctx, conn, args("dup"))
		if err != nil || id != "00000000-0000-4000-8000-0000000000a1" {
			t.Errorf("repeated key: %s %v, want the oldest row ...a1", id, err)
		}
	}
	if id, err := enqueue(ctx, conn, args("single")); err != nil || id != "00000000-0000-4000-8000-0000000000d4" {
		t.Errorf("existing key: %s %v, want ...d4", id, err)
	}
	fresh, err := enqueue(ctx, conn, args("fresh"))
	if err != nil {
		t.Fatal(err)
	}
	// The host's own insert of a repeated key still works: its table's rules
	// are unchanged; the function still answers with the oldest row.
	if _, err := conn.Exec(ctx, `insert into external_integration_outbox (organization_id, integration_connection_id,
		provider, command_type, local_entity_type, local_entity_id, idempotency_key)
		values ($1, $2, 'webhook', 'push_purchase_order', 'purchase_order', $1, 'fresh')`, org, connID); err != nil {
		t.Errorf("host insert of a repeated key: %v", err)
	}
	if id, err := enqueue(ctx, conn, args("fresh")); err != nil || id != fresh {
		t.Errorf("after a host duplicate: %s %v, want %s", id, err, fresh)
	}
	var n int
	if err := conn.QueryRow(ctx, `select count(*) from external_integration_outbox`).Scan(&n); err != nil || n != 6 {
		t.Errorf("%d rows, want 4 host rows + 1 enqueued + 1 host insert (%v)", n, err)
	}

	// Down removes the function, its indexes and its column, and nothing else.
	downTo(t, url, 1)
	var leftovers int
	if err := conn.QueryRow(ctx, `select
		(select count(*) from pg_proc where proname like 'integration_outbox_enqueue%') +
		(select count(*) from pg_class where relname in ('external_integration_outbox_enqueue_key_idx', 'external_integration_outbox_legacy_key_idx')) +
		(select count(*) from information_schema.columns where table_name = 'external_integration_outbox' and column_name = 'idempotency_enforced')`).Scan(&leftovers); err != nil {
		t.Fatal(err)
	}
	if leftovers != 0 {
		t.Errorf("down left %d of the function's objects", leftovers)
	}
	if err := conn.QueryRow(ctx, `select count(*) from external_integration_outbox`).Scan(&n); err != nil || n != 6 {
		t.Errorf("down lost rows: %d (%v)", n, err)
	}
}

// BenchmarkEnqueue measures one call of the function in its own transaction:
// a new key, and a repeated key (the answer is the existing row). The
// plain-insert case is the host's direct insert of the same row, for scale.
func BenchmarkEnqueue(b *testing.B) {
	for _, repeated := range []bool{false, true} {
		b.Run(fmt.Sprintf("repeated=%v", repeated), func(b *testing.B) {
			f := pg.NewDB(b)
			org := f.NewID(b)
			args := enqueueArgs{org, f.Connection(b, testenv.ConnectionOpts{OrganizationID: org}),
				"push_purchase_order", "purchase_order", f.PurchaseOrder(b, org, "", 1), `{"externalSupplierId": "SUP-1"}`, "k"}
			ctx := context.Background()
			i := 0
			for b.Loop() {
				if !repeated {
					i++
					args[6] = fmt.Sprintf("k-%d", i)
				}
				if _, err := enqueue(ctx, f.Pool, args); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("plain-insert", func(b *testing.B) {
		f := pg.NewDB(b)
		org := f.NewID(b)
		conn := f.Connection(b, testenv.ConnectionOpts{OrganizationID: org})
		po := f.PurchaseOrder(b, org, "", 1)
		ctx := context.Background()
		i := 0
		for b.Loop() {
			i++
			if _, err := f.Pool.Exec(ctx, `insert into external_integration_outbox (organization_id, integration_connection_id,
				provider, command_type, local_entity_type, local_entity_id, payload_json, idempotency_key, next_attempt_at)
				values ($1, $2, 'sandbox', 'push_purchase_order', 'purchase_order', $3, '{"externalSupplierId": "SUP-1"}', $4, now())`,
				org, conn, po, fmt.Sprintf("k-%d", i)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// downTo rolls the migrations back to version (whatever later migrations
// other work adds), one migrate.Down at a time.
func downTo(t *testing.T, url string, version int64) {
	t.Helper()
	if err := migrate.DownTo(context.Background(), url, version); err != nil {
		t.Fatalf("migrating down to %d: %v", version, err)
	}
}

// The functions name the host's tables where the install found them, so a
// caller's search_path does not matter: here it leads to a schema with
// tables of the same names, which stay empty, while the host's tables in
// public get the command; a repeated key and a key of the host's own rows
// return the row they name (integration_outbox_enqueue_existing, named the
// same way). Before migration 22 the functions set the search_path on every
// call instead.
func TestEnqueueUsesTheInstallsTablesWhateverTheCallersSearchPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := freshDB(t)
	if _, err := conn.Exec(ctx, `create schema integration; create schema decoy;`+
		seedOutboxTable("public.external_integration_outbox")+seedConnectionsTable("public.integration_connections")+
		seedOutboxTable("decoy.external_integration_outbox")+`
		create table decoy.integration_connections (id uuid primary key, organization_id uuid not null, provider text not null);`); err != nil {
		t.Fatal(err)
	}
	// The host's connection and its own keyed row, from before the install.
	org := "00000000-0000-4000-8000-0000000000ee"
	var connID, hostRow string
	if err := conn.QueryRow(ctx, `insert into public.integration_connections (organization_id, provider)
		values ($1, 'webhook') returning id::text`, org).Scan(&connID); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `insert into public.external_integration_outbox (organization_id, integration_connection_id,
			provider, command_type, local_entity_type, local_entity_id, idempotency_key)
		values ($1, $2, 'webhook', 'push_purchase_order', 'purchase_order', $1, 'host-key') returning id::text`,
		org, connID).Scan(&hostRow); err != nil {
		t.Fatal(err)
	}
	if err := migrate.Up(ctx, url+"&search_path=integration,public"); err != nil {
		t.Fatal(err)
	}
	// The decoy holds the same connection, so a call that read it would
	// succeed and write there.
	if _, err := conn.Exec(ctx, `insert into decoy.integration_connections values ($1, $2, 'decoy')`, connID, org); err != nil {
		t.Fatal(err)
	}

	if _, err := conn.Exec(ctx, `set search_path = decoy`); err != nil {
		t.Fatal(err)
	}
	call := `select integration.integration_outbox_enqueue($1, $2, 'push_purchase_order', 'purchase_order', $1, '{}', $3)::text`
	var first, again, host string
	if err := conn.QueryRow(ctx, call, org, connID, "k-1").Scan(&first); err != nil {
		t.Fatalf("enqueue with the caller's search_path on another schema: %v", err)
	}
	if err := conn.QueryRow(ctx, call, org, connID, "k-1").Scan(&again); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, call, org, connID, "host-key").Scan(&host); err != nil {
		t.Fatal(err)
	}
	if again != first || host != hostRow {
		t.Errorf("repeated key returned %s, want %s; the host's key returned %s, want %s", again, first, host, hostRow)
	}
	var inPublic, inDecoy int
	var provider string
	if err := conn.QueryRow(ctx, `select (select count(*) from public.external_integration_outbox where idempotency_key = 'k-1'),
			(select count(*) from decoy.external_integration_outbox),
			(select provider from public.external_integration_outbox where id = $1)`, first).Scan(&inPublic, &inDecoy, &provider); err != nil {
		t.Fatal(err)
	}
	if inPublic != 1 || inDecoy != 0 || provider != "webhook" {
		t.Errorf("host's outbox holds %d rows of the key (want 1), the decoy %d (want 0); provider %q (want webhook, the host's connection's)",
			inPublic, inDecoy, provider)
	}
}
