package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/migrate"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

// hostRows is how many rows the host outbox of the live-install tests holds:
// enough that building an index on it inside a transaction holds the host's
// inserts back visibly, few enough to load in a second or two.
const hostRows = 300_000

// maxHostWait is the longest a host insert may wait for a lock while a
// migration step runs: the 1 s the install promises (the Installer's own
// lock timeout is 200 ms). The inserter's session runs with it as its
// lock_timeout, so an insert held back that long fails (55P03): what the
// test asserts is a lock wait, not a wall-clock time, which the scheduling
// of a loaded machine could stretch.
const maxHostWait = time.Second

// loadHostOutbox creates the host's outbox (seed shape) with rows rows,
// most of them completed, set-based.
func loadHostOutbox(t *testing.T, conn *pgx.Conn, rows int) {
	t.Helper()
	_, err := conn.Exec(context.Background(), seedOutboxTable("external_integration_outbox")+fmt.Sprintf(`
		insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
			local_entity_type, local_entity_id, idempotency_key, status, attempt_count, created_at)
		select ('00000000-0000-4000-8000-' || lpad((g %% 50)::text, 12, '0'))::uuid, gen_random_uuid(), 'webhook',
			'push_purchase_order', 'purchase_order', gen_random_uuid(), 'key-' || g,
			(array['completed', 'completed', 'completed', 'queued', 'failed'])[1 + g %% 5], g %% 3,
			now() - make_interval(secs => %d - g)
		from generate_series(1, %d) g;
		analyze external_integration_outbox;`, rows, rows))
	if err != nil {
		t.Fatal(err)
	}
}

// hostInserter inserts into the host outbox as the back office does, one
// row at a time, and keeps the longest time one insert took.
type hostInserter struct {
	mu       sync.Mutex
	longest  time.Duration
	inserted int
	err      error
}

func startHostInserter(t *testing.T, url string) (stop func() *hostInserter) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("set lock_timeout = '%dms'", maxHostWait.Milliseconds())); err != nil {
		t.Fatal(err)
	}
	h := &hostInserter{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			start := time.Now()
			_, err := conn.Exec(ctx, `insert into external_integration_outbox (organization_id, integration_connection_id,
				provider, command_type, local_entity_type, local_entity_id, idempotency_key)
				values (gen_random_uuid(), gen_random_uuid(), 'webhook', 'push_purchase_order', 'purchase_order',
					gen_random_uuid(), 'live-' || gen_random_uuid())`)
			took := time.Since(start)
			h.mu.Lock()
			if err != nil && ctx.Err() == nil {
				h.err = err
			}
			if err == nil {
				h.inserted++
				h.longest = max(h.longest, took)
			}
			h.mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return func() *hostInserter {
		cancel()
		<-done
		conn.Close(context.Background())
		return h
	}
}

// holdHostTransaction keeps a host transaction that wrote to the outbox open
// for d: an ALTER that waited for it without a lock timeout would hold every
// insert behind it for d.
func holdHostTransaction(t *testing.T, url string, d time.Duration) (wait func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `insert into external_integration_outbox (organization_id, integration_connection_id,
		provider, command_type, local_entity_type, local_entity_id, idempotency_key)
		values (gen_random_uuid(), gen_random_uuid(), 'webhook', 'push_purchase_order', 'purchase_order',
			gen_random_uuid(), 'long-' || gen_random_uuid())`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		time.Sleep(d)
		err := tx.Commit(ctx)
		conn.Close(ctx)
		done <- err
	}()
	return func() {
		if err := <-done; err != nil {
			t.Errorf("committing the long host transaction: %v", err)
		}
	}
}

// Every migration step, up and down, while the host inserts continuously
// into a 300k-row outbox and, at the start of each phase, holds a writing
// transaction open for 1.5 s: no insert waits a second or more, no insert
// fails, and the table is never rewritten.
func TestMigrationStepsNeverBlockHostInserts(t *testing.T) {
	ctx := context.Background()
	url, conn := freshDB(t)
	loadHostOutbox(t, conn, hostRows)
	var fileBefore uint32
	relfile := `select relfilenode from pg_class where oid = 'external_integration_outbox'::regclass`
	if err := conn.QueryRow(ctx, relfile).Scan(&fileBefore); err != nil {
		t.Fatal(err)
	}
	phases := []struct {
		name string
		run  func() error
	}{
		{"up", func() error { return migrate.Up(ctx, url) }},
		{"every down step", func() error { return migrate.DownTo(ctx, url, 0) }},
		{"up again", func() error { return migrate.Up(ctx, url) }},
	}
	for _, phase := range phases {
		stop := startHostInserter(t, url)
		time.Sleep(50 * time.Millisecond)
		waitLong := holdHostTransaction(t, url, 1500*time.Millisecond)
		err := phase.run()
		waitLong()
		h := stop()
		if err != nil {
			t.Fatalf("%s: %v", phase.name, err)
		}
		if h.err != nil {
			t.Errorf("%s: a host insert failed (a lock wait of %v or more fails it): %v", phase.name, maxHostWait, h.err)
		}
		if h.inserted < 10 {
			t.Errorf("%s: only %d host inserts ran during the step", phase.name, h.inserted)
		}
		t.Logf("%s: %d host inserts, the longest took %v", phase.name, h.inserted, h.longest)
	}
	var fileAfter uint32
	if err := conn.QueryRow(ctx, relfile).Scan(&fileAfter); err != nil {
		t.Fatal(err)
	}
	if fileAfter != fileBefore {
		t.Errorf("the host's outbox was rewritten: relfilenode %d -> %d", fileBefore, fileAfter)
	}
	assertOwnedIndexesValid(t, conn)
}

// ownedIndexes lists every index recorded as ours with whether it is valid.
func assertOwnedIndexesValid(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
		select o.object_name, coalesce(i.indisvalid, false)
		from integration_outbox_owned_objects o
		left join pg_class c on c.relname = o.object_name and c.relnamespace = current_schema()::regnamespace
		left join pg_index i on i.indexrelid = c.oid
		where o.kind = 'index' order by o.id`)
	if err != nil {
		t.Fatal(err)
	}
	type idx struct {
		Name  string
		Valid bool
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[idx])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 {
		t.Fatal("no index recorded as ours")
	}
	for _, ix := range got {
		if !ix.Valid {
			t.Errorf("index %s is missing or INVALID", ix.Name)
		}
	}
}

// An install killed while it builds an index (its backend terminated, as
// when the migrator is killed) leaves that index INVALID; the next run
// rebuilds it and completes.
func TestKilledInstallRerunsToCompletion(t *testing.T) {
	ctx := context.Background()
	url, conn := freshDB(t)
	loadHostOutbox(t, conn, 20_000)
	if err := migrate.Up(ctx, url); err != nil {
		t.Fatal(err)
	}
	latest, err := migrate.CurrentVersion(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	downTo(t, url, 3) // migration 4 builds three indexes on the outbox

	// A host transaction that wrote to the outbox keeps the concurrent build
	// waiting, so that it can be caught mid-way.
	waitLong := holdHostTransaction(t, url, 3*time.Second)
	upErr := make(chan error, 1)
	go func() { upErr <- migrate.Up(ctx, url) }()
	var pid int32
	for deadline := time.Now().Add(10 * time.Second); pid == 0 && time.Now().Before(deadline); {
		err := conn.QueryRow(ctx, `select pid from pg_stat_activity
			where datname = current_database() and query ilike 'create index concurrently%' and wait_event_type = 'Lock'`).Scan(&pid)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if pid == 0 {
		t.Fatal("never saw the concurrent index build waiting")
	}
	if _, err := conn.Exec(ctx, `select pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	if err := <-upErr; err == nil {
		t.Fatal("the killed install reported success")
	}
	waitLong()
	var invalid int
	if err := conn.QueryRow(ctx, `select count(*) from pg_index
		where indrelid = 'external_integration_outbox'::regclass and not indisvalid`).Scan(&invalid); err != nil {
		t.Fatal(err)
	}
	if invalid != 1 {
		t.Fatalf("after the kill %d INVALID indexes on the outbox, want the interrupted one", invalid)
	}

	if err := migrate.Up(ctx, url); err != nil {
		t.Fatalf("rerun after the kill: %v", err)
	}
	if v, err := migrate.CurrentVersion(ctx, url); err != nil || v != latest {
		t.Errorf("after the rerun the schema is at %d (%v), want %d", v, err, latest)
	}
	if err := conn.QueryRow(ctx, `select count(*) from pg_index
		where indrelid = 'external_integration_outbox'::regclass and not indisvalid`).Scan(&invalid); err != nil || invalid != 0 {
		t.Errorf("after the rerun %d INVALID indexes (%v)", invalid, err)
	}
	assertOwnedIndexesValid(t, conn)
}

// An index or a column the host already has under one of our names, with
// another definition, stops the install with what to do; nothing of the
// host's is changed.
func TestInstallRefusesOurNamesWithAnotherDefinition(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, host string
		want       []string
	}{
		{"index", `create index external_integration_outbox_entity_order_idx on external_integration_outbox (status)`,
			[]string{"index external_integration_outbox_entity_order_idx that is not ours",
				"drop index concurrently external_integration_outbox_entity_order_idx", "run make migrate again"}},
		{"unique index", `create index external_integration_outbox_enqueue_key_idx
				on external_integration_outbox (organization_id, idempotency_key)`,
			[]string{"external_integration_outbox_enqueue_key_idx", "create unique index concurrently", "run make migrate again"}},
		{"column", `alter table external_integration_outbox add column claim_token text`,
			[]string{"column claim_token of type text", "needs uuid", "rename column claim_token", "run make migrate again"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url, conn := freshDB(t)
			if _, err := conn.Exec(ctx, seedOutboxTable("external_integration_outbox")+c.host); err != nil {
				t.Fatal(err)
			}
			before := tableIndexes(t, conn, "external_integration_outbox")
			err := migrate.Up(ctx, url)
			if err == nil {
				t.Fatal("the install accepted it")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			after := tableIndexes(t, conn, "external_integration_outbox")
			for _, def := range before {
				if !strings.Contains(strings.Join(after, "\n"), def) {
					t.Errorf("the host's index %s was changed", def)
				}
			}
		})
	}
}

// What the old worker left in processing gets a defined future: rows without
// a lease or a provider status a lease ending 40 minutes after the install
// (then the claim reclaims them), accepted rows without a follow-up time one
// within the hour. Other rows are untouched; a later run changes nothing.
func TestOldWorkerLeftoversGetALeaseAndAFollowUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := freshDB(t)
	if _, err := conn.Exec(ctx, seedOutboxTable("external_integration_outbox")+`
		insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
			local_entity_type, local_entity_id, idempotency_key, status, attempt_count, provider_status, next_attempt_at)
		select '00000000-0000-4000-8000-0000000000a1', gen_random_uuid(), 'webhook', 'push_purchase_order',
			'purchase_order', gen_random_uuid(), 'old-' || g, 'processing', 1,
			case when g > 1200 then 'accepted' end,
			case when g > 1300 then now() + interval '2 hours' end
		from generate_series(1, 1310) g;
		insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
			local_entity_type, local_entity_id, idempotency_key, status)
		values ('00000000-0000-4000-8000-0000000000a1', gen_random_uuid(), 'webhook', 'push_purchase_order',
			'purchase_order', gen_random_uuid(), 'queued-1', 'queued');`); err != nil {
		t.Fatal(err)
	}
	// Every host column of the rows that are not leftovers.
	const others = `select string_agg(t::text, E'\n' order by id) from (
		select id, organization_id, integration_connection_id, provider, command_type, local_entity_type,
			local_entity_id, payload_json, idempotency_key, status, attempt_count, next_attempt_at, last_error,
			provider_reference, provider_status, completed_at, created_at
		from external_integration_outbox
		where idempotency_key = 'queued-1' or idempotency_key in (select 'old-' || g from generate_series(1301, 1310) g)) t`
	var othersBefore string
	if err := conn.QueryRow(ctx, others).Scan(&othersBefore); err != nil {
		t.Fatal(err)
	}
	if err := migrate.Up(ctx, url); err != nil {
		t.Fatal(err)
	}
	var leased, followUps, untouched int
	if err := conn.QueryRow(ctx, `select
		count(*) filter (where provider_status is null and claim_token is null
			and lease_expires_at between now() + interval '39 minutes' and now() + interval '40 minutes'),
		count(*) filter (where provider_status is not null and lease_expires_at is null
			and next_attempt_at > now() and next_attempt_at <= now() + interval '1 hour'
			and idempotency_key <> all (array(select 'old-' || g from generate_series(1301, 1310) g))),
		count(*) filter (where next_attempt_at > now() + interval '1 hour')
		from external_integration_outbox where status = 'processing'`).Scan(&leased, &followUps, &untouched); err != nil {
		t.Fatal(err)
	}
	if leased != 1200 || followUps != 100 || untouched != 10 {
		t.Errorf("after the install: %d leased 40 minutes ahead (want 1200), %d followed up within the hour (want 100), "+
			"%d accepted rows keep their own follow-up time (want 10)", leased, followUps, untouched)
	}

	// A later run keeps the leases and follow-up times it set.
	const leftoverState = `select string_agg(id::text || lease_expires_at::text || coalesce(next_attempt_at::text, ''), ',' order by id)
		from external_integration_outbox where status = 'processing'`
	var first, second string
	if err := conn.QueryRow(ctx, leftoverState).Scan(&first); err != nil {
		t.Fatal(err)
	}
	if err := migrate.Up(ctx, url); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, leftoverState).Scan(&second); err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Error("a second make migrate moved the leftovers' lease or follow-up time")
	}
	var othersAfter string
	if err := conn.QueryRow(ctx, others).Scan(&othersAfter); err != nil {
		t.Fatal(err)
	}
	if othersAfter != othersBefore {
		t.Errorf("the install changed rows that are not leftovers:\n got %s\nwant %s", othersAfter, othersBefore)
	}

	// Once the lease has passed (moved into the past here), the claim
	// reclaims the row like any expired lease; a due follow-up is claimed too.
	var leaseRow, followRow string
	if err := conn.QueryRow(ctx, `update external_integration_outbox set lease_expires_at = now() - interval '1 second'
		where id = (select id from external_integration_outbox where idempotency_key = 'old-1') returning id::text`).Scan(&leaseRow); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `update external_integration_outbox set next_attempt_at = now() - interval '1 second'
		where id = (select id from external_integration_outbox where idempotency_key = 'old-1201') returning id::text`).Scan(&followRow); err != nil {
		t.Fatal(err)
	}
	pool := testenv.OpenPool(t, url, nil)
	claims, err := outbox.NewStore(pool).Claim(ctx, outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, c := range claims {
		got[c.ID] = c.Reclaimed
	}
	if reclaimed, ok := got[leaseRow]; !ok || !reclaimed {
		t.Errorf("the leftover whose lease passed was not reclaimed: claims %v", got)
	}
	if _, ok := got[followRow]; !ok {
		t.Errorf("the accepted leftover whose follow-up is due was not claimed: claims %v", got)
	}
	var queued string
	if err := conn.QueryRow(ctx, `select id::text from external_integration_outbox where idempotency_key = 'queued-1'`).Scan(&queued); err != nil {
		t.Fatal(err)
	}
	if _, ok := got[queued]; !ok || len(claims) != 3 {
		t.Errorf("claimed %v, want the two due leftovers and the queued row (the other leftovers wait)", got)
	}
}
