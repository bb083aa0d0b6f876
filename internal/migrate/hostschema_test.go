package migrate_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"integration-outbox/internal/migrate"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

// Host schemas as they are in the field: the live install over each of them.

// latestVersion is the version a complete install reaches.
func latestVersion(t *testing.T) int64 {
	t.Helper()
	url, _ := freshDB(t)
	if err := migrate.Up(context.Background(), url); err != nil {
		t.Fatal(err)
	}
	v, err := migrate.CurrentVersion(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func hasColumn(t *testing.T, conn *pgx.Conn, schema, table, column string) bool {
	t.Helper()
	return columns(t, conn, schema, table)[column]
}

// A host outbox holding a status the worker does not know: the install looks
// before it changes anything, refuses naming the statuses and what to do,
// and the host's writes of that status go on working. Once the rows carry
// statuses of ours, it installs.
func TestAHostStatusOutsideOursIsRefusedUpFront(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := freshDB(t)
	if _, err := conn.Exec(ctx, seedOutboxTable("external_integration_outbox")+`
		insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
			local_entity_type, local_entity_id, idempotency_key, status)
		select gen_random_uuid(), gen_random_uuid(), 'webhook', 'push_purchase_order', 'purchase_order',
			gen_random_uuid(), 'k' || g, (array['cancelled', 'cancelled', 'queued'])[1 + g % 3]
		from generate_series(0, 5) g`); err != nil {
		t.Fatal(err)
	}
	err := migrate.Up(ctx, url)
	if err == nil {
		t.Fatal("the install accepted a host status outside ours")
	}
	for _, want := range []string{"'cancelled' (4 rows)", "set status = 'completed' where status in ('cancelled')",
		"nothing was changed", "run make migrate again"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	hostInsertsCancelled(t, conn)
	if hasColumn(t, conn, "public", "external_integration_outbox", "claim_token") {
		t.Error("the refused install added claim_token to the host's outbox")
	}

	if _, err := conn.Exec(ctx, `update external_integration_outbox set status = 'completed' where status = 'cancelled'`); err != nil {
		t.Fatal(err)
	}
	if err := migrate.Up(ctx, url); err != nil {
		t.Fatalf("after the rows were moved: %v", err)
	}
	if _, err := conn.Exec(ctx, `insert into external_integration_outbox (organization_id, integration_connection_id,
		provider, command_type, local_entity_type, local_entity_id, idempotency_key, status)
		values (gen_random_uuid(), gen_random_uuid(), 'webhook', 'c', 't', gen_random_uuid(), 'after', 'cancelled')`); err == nil {
		t.Error("the installed status check accepts 'cancelled'")
	}
}

// An earlier run that stopped at validating the status check (as make
// migrate did before it looked first) left the check NOT VALID and recorded
// as ours, refusing the host's writes: the next run drops it and refuses
// with what to do.
func TestALeftoverUnvalidatedStatusCheckNoLongerRefusesHostWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := freshDB(t)
	if err := migrate.Up(ctx, url); err != nil {
		t.Fatal(err)
	}
	// The state the failed validation left: our check, NOT VALID, over a
	// row it refuses.
	if _, err := conn.Exec(ctx, `
		alter table external_integration_outbox drop constraint external_integration_outbox_status_check;
		insert into external_integration_outbox (organization_id, status) values (gen_random_uuid(), 'cancelled');
		alter table external_integration_outbox add constraint external_integration_outbox_status_check
			check (status in ('queued', 'processing', 'completed', 'failed', 'uncertain', 'unsupported', 'dead_letter')) not valid;`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `insert into external_integration_outbox (organization_id, status) values (gen_random_uuid(), 'cancelled')`); err == nil {
		t.Fatal("the leftover check does not refuse the host's write: the test does not set the state up")
	}
	err := migrate.Up(ctx, url)
	if err == nil || !strings.Contains(err.Error(), "'cancelled' (1 rows)") || !strings.Contains(err.Error(), "was dropped") {
		t.Fatalf("make migrate over the leftover check: %v", err)
	}
	hostInsertsCancelled(t, conn)
	var recorded int
	if err := conn.QueryRow(ctx, `select count(*) from integration_outbox_owned_objects where kind = 'constraint'`).Scan(&recorded); err != nil || recorded != 0 {
		t.Errorf("the dropped check is still recorded as ours (%d, %v)", recorded, err)
	}
}

func hostInsertsCancelled(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), `insert into external_integration_outbox (organization_id,
		integration_connection_id, provider, command_type, local_entity_type, local_entity_id, idempotency_key, status)
		values (gen_random_uuid(), gen_random_uuid(), 'webhook', 'c', 't', gen_random_uuid(), 'k-' || gen_random_uuid(), 'cancelled')`); err != nil {
		t.Errorf("the host's own insert of a 'cancelled' row is refused: %v", err)
	}
}

// Two make migrate runs at once over a host outbox: the second waits for the
// first (it must not hold a snapshot the first's concurrent index builds
// wait for), and both end with a complete schema.
func TestTwoMigrateRunsAtOnceBothComplete(t *testing.T) {
	t.Parallel()
	want := latestVersion(t)
	for _, c := range []struct {
		name string
		// holdFirst keeps the first run's first index build waiting this
		// long behind a host transaction.
		holdFirst time.Duration
	}{{"at once", 0}, {"the first held up before its first index build", 2 * time.Second}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			url, conn := freshDB(t)
			loadHostOutbox(t, conn, 5_000)
			var waitLong func()
			if c.holdFirst > 0 {
				waitLong = holdHostTransaction(t, url, c.holdFirst)
			}
			errs := upTwiceAtOnce(ctx, url)
			if waitLong != nil {
				waitLong()
			}
			for i, err := range errs {
				if err != nil {
					t.Errorf("run %d: %v", i+1, err)
				}
			}
			if v, err := migrate.CurrentVersion(ctx, url); err != nil || v != want {
				t.Errorf("the schema is at %d (%v), want %d", v, err, want)
			}
			assertOwnedIndexesValid(t, conn)
		})
	}
}

// upTwiceAtOnce runs make migrate twice at once on url, the second 100 ms
// after the first, and returns what each run returned.
func upTwiceAtOnce(ctx context.Context, url string) []error {
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = migrate.Up(ctx, url)
		}()
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	return errs
}

// A host whose created_at is a timestamp without time zone (as TypeORM's
// @CreateDateColumn makes it) beside our timestamptz: the install completes,
// with the per-entity order's index in the form such a table allows, and the
// claim keeps the order there. With both columns of one type, the index
// keeps its usual form.
func TestAHostCreatedAtWithoutTimeZoneInstallsAndKeepsTheOrder(t *testing.T) {
	t.Parallel()
	want := latestVersion(t)
	for _, c := range []struct {
		name, nextAttemptAt, predicate string
	}{
		{"created_at timestamp, next_attempt_at timestamptz", "timestamptz", "next_attempt_at IS NOT NULL"},
		{"both timestamp", "timestamp", "next_attempt_at > created_at"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url, conn := freshDB(t)
			table := strings.NewReplacer("next_attempt_at timestamptz", "next_attempt_at "+c.nextAttemptAt,
				"created_at timestamptz not null default now()", "created_at timestamp without time zone not null default now()").
				Replace(seedOutboxTable("external_integration_outbox"))
			if _, err := conn.Exec(ctx, table); err != nil {
				t.Fatal(err)
			}
			if err := migrate.Up(ctx, url); err != nil {
				t.Fatal(err)
			}
			if v, err := migrate.CurrentVersion(ctx, url); err != nil || v != want {
				t.Fatalf("the schema is at %d (%v), want %d", v, err, want)
			}
			var def string
			if err := conn.QueryRow(ctx, `select pg_get_indexdef('external_integration_outbox_entity_order_idx'::regclass)`).Scan(&def); err != nil {
				t.Fatalf("no per-entity order index: %v", err)
			}
			if !strings.Contains(def, c.predicate) {
				t.Errorf("the per-entity order index is %s, want a condition with %s", def, c.predicate)
			}
			assertOwnedIndexesValid(t, conn)
			assertEntityOrderHolds(t, url, conn)
		})
	}
}

// assertEntityOrderHolds enqueues a command scheduled an hour ahead and a
// newer one due now for the same entity: the claim takes neither (the
// newer waits behind the older), then, the older due, the older alone.
func assertEntityOrderHolds(t *testing.T, url string, conn *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	org := "00000000-0000-4000-8000-0000000000aa"
	connID, args := webhookConnection(t, conn, org)
	_ = connID
	older := mustEnqueue(t, conn, args("older"))
	newer := mustEnqueue(t, conn, args("newer"))
	if _, err := conn.Exec(ctx, `update external_integration_outbox set local_entity_id = $3
		where id in ($1, $2)`, older, newer, "00000000-0000-4000-8000-0000000000bb"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `update external_integration_outbox set next_attempt_at = now() + interval '1 hour' where id = $1`, older); err != nil {
		t.Fatal(err)
	}
	pool := testenv.OpenPool(t, url, nil)
	store := outbox.NewStore(pool)
	p := outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: time.Minute}
	claims, err := store.Claim(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 0 {
		t.Fatalf("claimed %v while the older command of the entity waits for its time", claims)
	}
	if _, err := conn.Exec(ctx, `update external_integration_outbox set next_attempt_at = now() - interval '1 second' where id = $1`, older); err != nil {
		t.Fatal(err)
	}
	claims, err = store.Claim(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 1 || claims[0].ID != older {
		t.Fatalf("claimed %v, want the older command %s alone", claims, older)
	}
}

// Commands of one purchase order enqueued in one host transaction (approve,
// then amend) go in the order they were enqueued; so do the host's own plain
// inserts in one transaction, where created_at's default was now().
func TestCommandsOfOneTransactionGoInTheOrderTheyWereInserted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := freshDB(t)
	if err := migrate.Up(ctx, url); err != nil {
		t.Fatal(err)
	}
	org := "00000000-0000-4000-8000-0000000000cc"
	_, args := webhookConnection(t, conn, org)
	const orders = 20
	firsts := map[string]bool{}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range orders {
		entity := "00000000-0000-4000-9000-" + strings.Repeat("0", 10) + string(rune('a'+i/10)) + string(rune('0'+i%10))
		for j, step := range []string{"approve", "amend"} {
			a := args(entity + "-" + step)
			a[4] = entity
			id := mustEnqueue(t, tx, a)
			if j == 0 {
				firsts[id] = true
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	pool := testenv.OpenPool(t, url, nil)
	claims, err := outbox.NewStore(pool).Claim(ctx, outbox.ClaimParams{Limit: 100, MaxAttempts: 10, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != orders {
		t.Fatalf("claimed %d commands, want one per order (%d)", len(claims), orders)
	}
	for _, c := range claims {
		if !firsts[c.ID] {
			t.Errorf("an order's second command %s was claimed before its first", c.ID)
		}
	}

	// The host's plain inserts, two in one transaction.
	var inOrder bool
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var first, second time.Time
		insert := `insert into external_integration_outbox (organization_id, status) values (gen_random_uuid(), 'completed') returning created_at`
		if err := tx.QueryRow(ctx, insert).Scan(&first); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, insert).Scan(&second); err != nil {
			return err
		}
		inOrder = second.After(first)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !inOrder {
		t.Error("two host inserts in one transaction read the same created_at")
	}
}

// created_at's default becomes clock_timestamp() only where it was the
// transaction's start; the down step puts back exactly what it replaced, and
// any other default is left alone.
func TestCreatedAtDefaultIsReplacedOnlyWhereItWasTheTransactionStart(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ host, installed string }{
		{"now()", "clock_timestamp()"},
		{"CURRENT_TIMESTAMP", "clock_timestamp()"},
		{"(now() AT TIME ZONE 'utc'::text)", "(now() AT TIME ZONE 'utc'::text)"},
	} {
		t.Run(c.host, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url, conn := freshDB(t)
			table := strings.Replace(seedOutboxTable("external_integration_outbox"),
				"created_at timestamptz not null default now()", "created_at timestamptz not null default "+c.host, 1)
			if _, err := conn.Exec(ctx, table); err != nil {
				t.Fatal(err)
			}
			read := func() string {
				var d string
				if err := conn.QueryRow(ctx, `select column_default from information_schema.columns
					where table_name = 'external_integration_outbox' and column_name = 'created_at'`).Scan(&d); err != nil {
					t.Fatal(err)
				}
				return d
			}
			if err := migrate.Up(ctx, url); err != nil {
				t.Fatal(err)
			}
			if got := read(); got != c.installed {
				t.Errorf("installed, created_at's default is %s, want %s", got, c.installed)
			}
			if err := migrate.DownTo(ctx, url, 11); err != nil {
				t.Fatal(err)
			}
			if got := read(); got != c.host {
				t.Errorf("after the down step created_at's default is %s, want the host's %s", got, c.host)
			}
		})
	}
}

// The host's tables in public, our schema first on the search_path (or the
// role's own "$user" schema): our columns and indexes go onto the host's
// tables, no empty copy appears in front of them, and the host's commands
// are delivered. Host tables found in two schemas of the search_path are
// refused before anything changes.
func TestHostTablesFurtherAlongTheSearchPathAreTheOnesUsed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, schema, searchPath string }{
		{"integration,public", "integration", "integration,public"},
		{`"$user",public`, "", `"$user",public`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url, conn := freshDB(t)
			schema := c.schema
			if schema == "" {
				if err := conn.QueryRow(ctx, `select current_user`).Scan(&schema); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := conn.Exec(ctx, `create schema `+pgx.Identifier{schema}.Sanitize()+`;`+
				seedOutboxTable("public.external_integration_outbox")+seedConnectionsTable("public.integration_connections")); err != nil {
				t.Fatal(err)
			}
			pathURL := url + "&search_path=" + strings.ReplaceAll(c.searchPath, `"`, "%22")
			if err := migrate.Up(ctx, pathURL); err != nil {
				t.Fatal(err)
			}
			var copies []string
			rows, err := conn.Query(ctx, `select tablename from pg_tables where schemaname = $1
				and tablename in ('external_integration_outbox', 'integration_connections')`, schema)
			if err != nil {
				t.Fatal(err)
			}
			if copies, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				t.Fatal(err)
			}
			if len(copies) != 0 {
				t.Errorf("empty copies of host tables appeared in %s: %v", schema, copies)
			}
			if !hasColumn(t, conn, "public", "external_integration_outbox", "claim_token") {
				t.Error("the host's outbox in public lacks our claim_token")
			}
			var ours int
			if err := conn.QueryRow(ctx, `select count(*) from pg_indexes where schemaname = 'public'
				and tablename = 'external_integration_outbox' and indexname like 'external_integration_outbox_%_idx'`).Scan(&ours); err != nil || ours == 0 {
				t.Errorf("no index of ours on the host's outbox (%d, %v)", ours, err)
			}

			// A host command inserted as the application does (through public)
			// is claimed by the worker on the same search_path.
			pathConn, err := pgx.Connect(ctx, pathURL)
			if err != nil {
				t.Fatal(err)
			}
			defer pathConn.Close(ctx)
			var id string
			if err := conn.QueryRow(ctx, `
				with c as (insert into public.integration_connections (organization_id, provider)
				           values ('00000000-0000-4000-8000-0000000000dd', 'webhook') returning id, organization_id)
				insert into public.external_integration_outbox (organization_id, integration_connection_id, provider,
					command_type, local_entity_type, local_entity_id, idempotency_key)
				select organization_id, id, 'webhook', 'push_purchase_order', 'purchase_order', gen_random_uuid(), 'host-1' from c
				returning id`).Scan(&id); err != nil {
				t.Fatal(err)
			}
			pool := testenv.OpenPool(t, pathURL, nil)
			claims, err := outbox.NewStore(pool).Claim(ctx, outbox.ClaimParams{Limit: 10, MaxAttempts: 10, Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if len(claims) != 1 || claims[0].ID != id {
				t.Errorf("claimed %v, want the host's command %s", claims, id)
			}
		})
	}

	t.Run("a host table in two schemas of the search_path", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		url, conn := freshDB(t)
		if _, err := conn.Exec(ctx, `create schema integration;`+seedOutboxTable("public.external_integration_outbox")+
			seedOutboxTable("integration.external_integration_outbox")); err != nil {
			t.Fatal(err)
		}
		err := migrate.Up(ctx, url+"&search_path=integration,public")
		if err == nil {
			t.Fatal("the install accepted a host table found in two schemas")
		}
		for _, want := range []string{"external_integration_outbox is in integration and public", "nothing was changed", "run make migrate again"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		for _, schema := range []string{"public", "integration"} {
			if hasColumn(t, conn, schema, "external_integration_outbox", "claim_token") {
				t.Errorf("the refused install added claim_token to %s.external_integration_outbox", schema)
			}
		}
		var version int
		err = conn.QueryRow(ctx, `select count(*) from integration.`+migrate.VersionTable).Scan(&version)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
			t.Errorf("the refused install created its version table (%v)", err)
		}
	})
}

// The live install over a host schema as found in the field, while the host
// inserts without pause: its tables in public behind our schema on the
// search_path, a timestamp created_at, a row with a status of its own, and
// two installs at once. The first install refuses the foreign status before
// changing anything; once the row is moved, both runs complete; no host
// insert waits a second at any point.
func TestLiveInstallOverAHostSchemaAsFoundInTheField(t *testing.T) {
	t.Parallel()
	want := latestVersion(t)
	ctx := context.Background()
	url, conn := freshDB(t)
	table := strings.Replace(seedOutboxTable("public.external_integration_outbox"),
		"created_at timestamptz not null default now()", "created_at timestamp without time zone not null default now()", 1)
	if _, err := conn.Exec(ctx, `create schema integration;`+table+`
		insert into public.external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
			local_entity_type, local_entity_id, idempotency_key, status, attempt_count, created_at)
		select ('00000000-0000-4000-8000-' || lpad((g % 50)::text, 12, '0'))::uuid, gen_random_uuid(), 'webhook',
			'push_purchase_order', 'purchase_order', gen_random_uuid(), 'key-' || g,
			(array['completed', 'completed', 'completed', 'queued', 'failed', 'cancelled'])[1 + g % 6], g % 3,
			localtimestamp - make_interval(secs => 50000 - g)
		from generate_series(1, 50000) g;
		analyze public.external_integration_outbox;`); err != nil {
		t.Fatal(err)
	}
	pathURL := url + "&search_path=integration,public"

	stop := startHostInserter(t, pathURL)
	err := migrate.Up(ctx, pathURL)
	h := stop()
	if err == nil || !strings.Contains(err.Error(), "'cancelled'") {
		t.Fatalf("the install over a foreign status: %v", err)
	}
	if h.err != nil || h.inserted == 0 {
		t.Errorf("the host's inserts during the refused install: %d, %v", h.inserted, h.err)
	}
	if hasColumn(t, conn, "public", "external_integration_outbox", "claim_token") {
		t.Error("the refused install changed the host's outbox")
	}

	if _, err := conn.Exec(ctx, `update public.external_integration_outbox set status = 'completed' where status = 'cancelled'`); err != nil {
		t.Fatal(err)
	}
	stop = startHostInserter(t, pathURL)
	time.Sleep(50 * time.Millisecond)
	waitLong := holdHostTransaction(t, pathURL, 1500*time.Millisecond)
	errs := upTwiceAtOnce(ctx, pathURL)
	waitLong()
	h = stop()
	for i, err := range errs {
		if err != nil {
			t.Errorf("install %d: %v", i+1, err)
		}
	}
	if h.err != nil {
		t.Errorf("a host insert failed (a lock wait of %v or more fails it): %v", maxHostWait, h.err)
	}
	if h.inserted < 10 {
		t.Errorf("only %d host inserts ran during the installs", h.inserted)
	}
	if v, err := migrate.CurrentVersion(ctx, pathURL); err != nil || v != want {
		t.Errorf("the schema is at %d (%v), want %d", v, err, want)
	}
	var ours, invalid, copies int
	if err := conn.QueryRow(ctx, `
		select count(*) filter (where c.relname like 'external_integration_outbox_%_idx'), count(*) filter (where not i.indisvalid),
		    (select count(*) from pg_tables where schemaname = 'integration' and tablename = 'external_integration_outbox')
		from pg_index i join pg_class c on c.oid = i.indexrelid
		where i.indrelid = 'public.external_integration_outbox'::regclass`).Scan(&ours, &invalid, &copies); err != nil {
		t.Fatal(err)
	}
	if ours < 8 || invalid != 0 || copies != 0 {
		t.Errorf("on the host's outbox: %d indexes of ours (want 8 or more), %d INVALID; %d copies of the host's outbox in integration", ours, invalid, copies)
	}
}
