package outbox_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"integration-outbox/internal/outbox"
	"integration-outbox/internal/pgtx"
	"integration-outbox/internal/sqlroutine"
	"integration-outbox/internal/testenv"
)

var pg *testenv.Postgres

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.WithPostgres(&pg))
}

type bundle struct {
	f     *testenv.Fixture
	store *outbox.Store
	org   string
	conn  string
	po    string
}

func setup(t *testing.T) bundle {
	t.Helper()
	f := pg.NewDB(t)
	org := f.NewID(t)
	// The bundle's commands share one purchase order; per-entity order is
	// not what these tests are about (entity_order_test.go is), so their
	// connection opts out of it.
	return bundle{f: f, store: outbox.NewStore(f.Pool), org: org,
		conn: f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Config: map[string]any{"ordered": false}}),
		po:   f.PurchaseOrder(t, org, "", 2)}
}

func params(limit int) outbox.ClaimParams {
	return outbox.ClaimParams{Limit: limit, MaxAttempts: 10, Lease: 15 * time.Minute}
}

func ids(claims []outbox.Claim) []string {
	var out []string
	for _, c := range claims {
		out = append(out, c.ID)
	}
	return out
}

func TestClaimTakesOnlyDueClaimableRowsOldestFirstUpToTheLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour)
	past, future := time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	cmd := func(status string, attempts int, next *time.Time, age time.Duration) string {
		return b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po,
			Status: status, AttemptCount: attempts, NextAttemptAt: next, CreatedAt: base.Add(age)})
	}
	oldest := cmd("queued", 0, nil, 0)
	failedDue := cmd("failed", 2, &past, time.Second)
	queuedDue := cmd("queued", 0, &past, 2*time.Second)
	newest := cmd("queued", 0, nil, 3*time.Second)
	// Not claimable: not due, exhausted, or in a non-claimable state.
	cmd("failed", 1, &future, -time.Second)
	cmd("failed", 10, &past, -time.Second)
	for _, s := range []string{"completed", "uncertain", "unsupported", "dead_letter", "processing"} {
		cmd(s, 1, nil, -2*time.Second)
	}

	first, err := b.store.Claim(ctx, params(3))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(first), []string{oldest, failedDue, queuedDue}; !equal(got, want) {
		t.Fatalf("first claim = %v, want %v (oldest first, limit 3)", got, want)
	}
	for _, c := range first {
		r := b.f.Row(t, c.ID)
		if r.Status != "processing" || r.ClaimToken == nil || *r.ClaimToken != c.ClaimToken || r.LeaseExpiresAt == nil {
			t.Errorf("claimed row %s: %+v", c.ID, r)
		}
		if c.CommandType != "push_purchase_order" || c.ConnectionID != b.conn || c.OrganizationID != b.org {
			t.Errorf("claim fields: %+v", c)
		}
	}
	if r := b.f.Row(t, failedDue); r.AttemptCount != 3 {
		t.Errorf("claim must increment attempt_count: got %d, want 3", r.AttemptCount)
	}
	rest, err := b.store.Claim(ctx, params(50))
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(rest); !equal(got, []string{newest}) {
		t.Fatalf("second claim = %v, want only %v", got, newest)
	}
}

func TestConcurrentClaimersNeverClaimTheSameRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const rows = 600
	for range rows {
		b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
	}
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
	)
	for range 6 {
		wg.Go(func() {
			for {
				claims, err := b.store.Claim(ctx, params(25))
				if err != nil {
					t.Error(err)
					return
				}
				if len(claims) == 0 {
					return
				}
				mu.Lock()
				for _, c := range claims {
					seen[c.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != rows {
		t.Errorf("claimed %d distinct rows, want %d", len(seen), rows)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("row %s claimed %d times", id, n)
		}
	}
}

func TestExpiredLeaseIsReclaimedUnlessAcceptedOrExhausted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	crashed := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
	accepted := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
	exhausted := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po, AttemptCount: 9})
	p := params(10)
	p.Lease = time.Second
	first, err := b.store.Claim(ctx, p)
	if err != nil || len(first) != 3 {
		t.Fatalf("claim: %v %v", first, err)
	}
	// accepted: the provider took it (provider_status set, no lease).
	b.f.Pool.Exec(ctx, `update external_integration_outbox set provider_status = 'accepted', lease_expires_at = null where id = $1`, accepted)
	b.f.Pool.Exec(ctx, `update external_integration_outbox set lease_expires_at = now() - interval '1 second', started_at = now() where id = any($1)`,
		[]string{crashed, exhausted})

	n, err := b.store.DeadLetterExpired(ctx, outbox.ClaimParams{MaxAttempts: 10, OrganizationID: b.f.NewID(t)})
	if err != nil || n != 0 {
		t.Fatalf("DeadLetterExpired for another organization = %d, %v; want 0", n, err)
	}
	n, err = b.store.DeadLetterExpired(ctx, outbox.ClaimParams{MaxAttempts: 10})
	if err != nil || n != 1 {
		t.Fatalf("DeadLetterExpired = %d, %v; want 1", n, err)
	}
	if r := b.f.Row(t, exhausted); r.Status != "dead_letter" || r.LastError == nil {
		t.Errorf("exhausted row: %+v", r)
	}
	if got := b.f.Count(t, `select count(*) from external_integration_conflicts where outbox_id = $1 and status = 'open' and conflict_type = 'provider_rejected' and severity = 'high'`, exhausted); got != 1 {
		t.Errorf("exhausted row has %d open conflicts, want 1", got)
	}
	again, err := b.store.Claim(ctx, params(10))
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 1 || again[0].ID != crashed || !again[0].Reclaimed || again[0].AttemptCount != 2 {
		t.Fatalf("reclaim = %+v, want only %s reclaimed at attempt 2", again, crashed)
	}
	if again[0].ClaimToken == first[0].ClaimToken {
		t.Error("a reclaim must hand out a fresh claim token")
	}
	if r := b.f.Row(t, crashed); r.StartedAt != nil {
		t.Error("a reclaim must clear started_at")
	}
}

func TestStartConsumesTheClaimOnceAndLoadsScopedData(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
	claims, err := b.store.Claim(ctx, params(1))
	if err != nil || len(claims) != 1 {
		t.Fatal(claims, err)
	}
	c := claims[0]
	stale := outbox.StartRequest{OutboxID: id, OrganizationID: b.org, ConnectionID: b.conn, ClaimToken: b.f.NewID(t)}
	otherOrg := outbox.StartRequest{OutboxID: id, OrganizationID: b.f.NewID(t), ConnectionID: b.conn, ClaimToken: c.ClaimToken}
	otherConn := outbox.StartRequest{OutboxID: id, OrganizationID: b.org, ConnectionID: b.f.NewID(t), ClaimToken: c.ClaimToken}
	jobs, err := b.store.Start(ctx, []outbox.StartRequest{stale, otherOrg, otherConn})
	if err != nil || len(jobs) != 0 {
		t.Fatalf("stale/foreign start = %v, %v; want none", jobs, err)
	}
	good := outbox.StartRequest{OutboxID: id, OrganizationID: b.org, ConnectionID: b.conn, ClaimToken: c.ClaimToken}
	jobs, err = b.store.Start(ctx, []outbox.StartRequest{good, good})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("start = %v, %v; want one job", jobs, err)
	}
	j := jobs[0]
	if j.Connection == nil || j.Connection.Provider != "sandbox" || j.Connection.ID != b.conn || j.AttemptCount != 1 ||
		j.CommandType != "push_purchase_order" || j.LocalEntityID != b.po || j.OrganizationID != b.org {
		t.Fatalf("job = %+v", j)
	}
	again, err := b.store.Start(ctx, []outbox.StartRequest{good})
	if err != nil || len(again) != 0 {
		t.Fatalf("second start = %v, %v; want none (claim already consumed)", again, err)
	}
}

// A start and a release of one claim (the dispatcher gives back a claim
// whose message may have been sent anyway) cannot both win, whichever comes
// first and even while the first is uncommitted: the loser waits for the
// winner's token in integration_outbox_starts and does nothing. A start
// that won keeps its row in flight; a release that won leaves no start, and
// its own claim given back is one the dispatch run's housekeeping deletes.
func TestAStartAndAReleaseOfOneClaimCannotBothWin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, first := range []string{"start", "release"} {
		t.Run(first+" first", func(t *testing.T) {
			b := setup(t)
			id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
			claims, err := b.store.Claim(ctx, params(1))
			if err != nil || len(claims) != 1 {
				t.Fatal(claims, err)
			}
			c := claims[0]
			req := []outbox.StartRequest{{OutboxID: id, OrganizationID: b.org, ConnectionID: b.conn, ClaimToken: c.ClaimToken}}
			start := func(s *outbox.Store) (int, error) {
				jobs, err := s.Start(ctx, req)
				return len(jobs), err
			}
			release := func(s *outbox.Store) (int, error) { return s.Release(ctx, claims) }
			winner, loser := start, release
			if first == "release" {
				winner, loser = release, start
			}
			tx, err := b.f.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if n, err := winner(outbox.NewStore(tx)); err != nil || n != 1 {
				t.Fatalf("%s first = %d, %v; want 1", first, n, err)
			}
			// The loser runs while the winner's transaction is open: it must
			// wait for it, then find the claim consumed.
			type result struct {
				n   int
				err error
			}
			done := make(chan result, 1)
			go func() {
				n, err := loser(b.store)
				done <- result{n, err}
			}()
			select {
			case r := <-done:
				t.Fatalf("the second went through the uncommitted first: %d, %v", r.n, r.err)
			case <-time.After(200 * time.Millisecond):
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if r := <-done; r.err != nil || r.n != 0 {
				t.Fatalf("second after the first committed = %d, %v; want 0", r.n, r.err)
			}
			r := b.f.Row(t, id)
			if first == "start" && r.Status != "processing" {
				t.Errorf("started row released: %+v", r)
			}
			if first == "release" && r.Status != "queued" {
				t.Errorf("released row is %s", r.Status)
			}
		})
	}
}

func TestStartNeverLoadsAnotherTenantsConnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	otherOrg := b.f.NewID(t)
	foreignConn := b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: otherOrg})
	own := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
	foreign := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: foreignConn, EntityID: b.po})
	claims, err := b.store.Claim(ctx, params(10))
	if err != nil {
		t.Fatal(err)
	}
	var reqs []outbox.StartRequest
	for _, c := range claims {
		reqs = append(reqs, outbox.StartRequest{OutboxID: c.ID, OrganizationID: c.OrganizationID,
			ConnectionID: c.ConnectionID, ClaimToken: c.ClaimToken})
	}
	jobs, err := b.store.Start(ctx, reqs)
	if err != nil || len(jobs) != 2 {
		t.Fatalf("Start = %d jobs, %v; want 2", len(jobs), err)
	}
	for _, j := range jobs {
		if loaded, want := j.Connection != nil, j.ID == own; loaded != want {
			t.Errorf("job %s (own %v, foreign %v): connection loaded = %v, want %v", j.ID, j.ID == own, j.ID == foreign, loaded, want)
		}
	}
}

func TestRecordIsFencedByTheClaimTokenAndOpensOneConflict(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
	claims, _ := b.store.Claim(ctx, params(1))
	c := claims[0]
	if _, err := b.store.Start(ctx, []outbox.StartRequest{{OutboxID: id, OrganizationID: b.org, ConnectionID: b.conn, ClaimToken: c.ClaimToken}}); err != nil {
		t.Fatal(err)
	}
	dead := outbox.Outcome{OutboxID: id, OrganizationID: b.org, ConnectionID: b.conn, ClaimToken: b.f.NewID(t), Status: "dead_letter",
		LastError: "x", ConflictType: "provider_rejected", ConflictSummary: "s"}
	got, err := b.store.Record(ctx, []outbox.Outcome{dead})
	if err != nil || len(got.IDs) != 0 {
		t.Fatalf("stale token recorded: %v %v", got, err)
	}
	dead.ClaimToken = c.ClaimToken
	if got, err = b.store.Record(ctx, []outbox.Outcome{dead, dead}); err != nil || len(got.IDs) != 1 {
		t.Fatalf("record = %v, %v; want 1", got, err)
	}
	if n := b.f.Count(t, `select count(*) from external_integration_conflicts where outbox_id = $1`, id); n != 1 {
		t.Errorf("%d conflicts, want 1", n)
	}
	if got, err = b.store.Record(ctx, []outbox.Outcome{dead}); err != nil || len(got.IDs) != 0 {
		t.Fatalf("second record of a finished row = %v, %v; want none", got, err)
	}
}

func TestReleasePutsRowsBackWithoutConsumingTheAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po, Status: "failed", AttemptCount: 2})
	claims, _ := b.store.Claim(ctx, params(1))
	n, err := b.store.Release(ctx, claims)
	if err != nil || n != 1 {
		t.Fatalf("release = %d %v", n, err)
	}
	r := b.f.Row(t, id)
	if r.Status != "queued" || r.AttemptCount != 2 || r.ClaimToken != nil || r.LeaseExpiresAt != nil || r.NextAttemptAt != nil {
		t.Errorf("released row = %+v", r)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAcceptedRowsAreFollowedUpWhenDueAndDeadLetteredWhenExhausted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	due := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po, AttemptCount: 2})
	later := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po, AttemptCount: 2})
	exhausted := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po, AttemptCount: 10})
	accept := func(id string, in time.Duration) {
		_, err := b.f.Pool.Exec(ctx, `update external_integration_outbox set status = 'processing', provider_status = 'accepted',
			lease_expires_at = null, next_attempt_at = now() + make_interval(secs => $2) where id = $1`, id, in.Seconds())
		if err != nil {
			t.Fatal(err)
		}
	}
	accept(due, -time.Second)
	accept(later, time.Hour)
	accept(exhausted, -time.Second)
	n, err := b.store.DeadLetterExpired(ctx, outbox.ClaimParams{MaxAttempts: 10})
	if err != nil || n != 1 {
		t.Fatalf("DeadLetterExpired = %d, %v; want the exhausted accepted row", n, err)
	}
	if r := b.f.Row(t, exhausted); r.Status != "dead_letter" || !strings.Contains(*r.LastError, "never confirmed") {
		t.Errorf("exhausted accepted row: %+v", r)
	}
	claims, err := b.store.Claim(ctx, params(10))
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 1 || claims[0].ID != due || claims[0].AttemptCount != 3 {
		t.Fatalf("claims = %+v, want only the due follow-up %s", claims, due)
	}
	if r := b.f.Row(t, due); r.ProviderStatus != nil || r.LeaseExpiresAt == nil {
		t.Errorf("a follow-up claim must carry a lease and no provider status (so a crash is recovered): %+v", r)
	}
	if r := b.f.Row(t, later); r.Status != "processing" || r.ProviderStatus == nil {
		t.Errorf("not-yet-due accepted row changed: %+v", r)
	}
}

// A message that waited past its claim's lease arrives when the next
// dispatch may already have claimed the row again: Start refuses it, so the
// provider never gets two concurrent calls for one command.
func TestStartRefusesAClaimWhoseLeaseHasExpired(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
	claims, err := b.store.Claim(ctx, params(1))
	if err != nil || len(claims) != 1 {
		t.Fatal(claims, err)
	}
	late := claims[0]
	// The lease ran out while the message waited in the queue.
	if _, err := b.f.Pool.Exec(ctx, `update external_integration_outbox set lease_expires_at = now() - interval '1 second' where id = $1`, id); err != nil {
		t.Fatal(err)
	}
	req := outbox.StartRequest{OutboxID: id, OrganizationID: b.org, ConnectionID: b.conn, ClaimToken: late.ClaimToken,
		LeaseUntil: time.Now().Add(time.Hour)}
	jobs, err := b.store.Start(ctx, []outbox.StartRequest{req})
	if err != nil || len(jobs) != 0 {
		t.Fatalf("start of an expired claim = %v, %v; want none", jobs, err)
	}
	if r := b.f.Row(t, id); r.StartedAt != nil {
		t.Fatalf("expired claim marked started: %+v", r)
	}
	recorded, err := b.store.Record(ctx, []outbox.Outcome{{OutboxID: id, OrganizationID: b.org, ConnectionID: b.conn,
		ClaimToken: late.ClaimToken, Status: outbox.StatusCompleted}})
	if err != nil || len(recorded.IDs) != 0 {
		t.Fatalf("record of an expired, unstarted claim = %v, %v; want none", recorded, err)
	}
	// The next dispatch reclaims the row, and its new claim starts.
	again, err := b.store.Claim(ctx, params(1))
	if err != nil || len(again) != 1 || !again[0].Reclaimed || again[0].ClaimToken == late.ClaimToken {
		t.Fatalf("reclaim = %+v, %v; want the row with a new token", again, err)
	}
	req.ClaimToken = again[0].ClaimToken
	if jobs, err = b.store.Start(ctx, []outbox.StartRequest{req}); err != nil || len(jobs) != 1 {
		t.Fatalf("start of the new claim = %v, %v; want one job", jobs, err)
	}
}

// A started job's lease is extended to the end of its push: a dispatch that
// runs after the claim's own lease would have expired does not reclaim a job
// that is mid-call, and the job's result is recorded.
func TestStartExtendsTheLeaseOverTheWholePush(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
	short := params(1)
	short.Lease = 2 * time.Second
	claims, err := b.store.Claim(ctx, short)
	if err != nil || len(claims) != 1 {
		t.Fatal(claims, err)
	}
	c := claims[0]
	claimLease := *b.f.Row(t, id).LeaseExpiresAt
	until := time.Now().Add(time.Hour)
	jobs, err := b.store.Start(ctx, []outbox.StartRequest{{OutboxID: id, OrganizationID: b.org, ConnectionID: b.conn,
		ClaimToken: c.ClaimToken, LeaseUntil: until}})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("start = %v, %v; want one job", jobs, err)
	}
	if got := *b.f.Row(t, id).LeaseExpiresAt; got.Before(until.Add(-time.Millisecond)) {
		t.Fatalf("lease after start = %v, want extended to %v", got, until)
	}
	// Wait, by the database's clock, until the claim's own lease is over.
	for {
		var over bool
		if err := b.f.Pool.QueryRow(ctx, `select now() > $1`, claimLease).Scan(&over); err != nil {
			t.Fatal(err)
		}
		if over {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if again, err := b.store.Claim(ctx, params(1)); err != nil || len(again) != 0 {
		t.Fatalf("claim during the push = %+v, %v; want none (the job is mid-call)", again, err)
	}
	recorded, err := b.store.Record(ctx, []outbox.Outcome{{OutboxID: id, OrganizationID: b.org, ConnectionID: b.conn,
		ClaimToken: c.ClaimToken, Status: outbox.StatusCompleted}})
	if err != nil || len(recorded.IDs) != 1 {
		t.Fatalf("record = %v, %v; want the job recorded", recorded, err)
	}
	// Without LeaseUntil the claim's lease is kept, never shortened.
	id2 := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
	claims, err = b.store.Claim(ctx, params(1))
	if err != nil || len(claims) != 1 {
		t.Fatal(claims, err)
	}
	before := *b.f.Row(t, id2).LeaseExpiresAt
	if _, err := b.store.Start(ctx, []outbox.StartRequest{{OutboxID: id2, OrganizationID: b.org, ConnectionID: b.conn,
		ClaimToken: claims[0].ClaimToken, LeaseUntil: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	if after := *b.f.Row(t, id2).LeaseExpiresAt; !after.Equal(before) {
		t.Errorf("lease %v after a start with an earlier LeaseUntil, want it kept at %v", after, before)
	}
}

// The record statement appends the attempt history of what it recorded, and
// of nothing else: a stale token leaves no attempt row.
func TestRecordAppendsOneAttemptPerRecordedResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
	claims, _ := b.store.Claim(ctx, params(1))
	c := claims[0]
	if _, err := b.store.Start(ctx, []outbox.StartRequest{{OutboxID: id, OrganizationID: b.org, ConnectionID: b.conn, ClaimToken: c.ClaimToken}}); err != nil {
		t.Fatal(err)
	}
	began := time.Now().Add(-2 * time.Second)
	failed := outbox.Outcome{OutboxID: id, OrganizationID: b.org, ConnectionID: b.conn, ClaimToken: b.f.NewID(t),
		Status: "failed", LastError: "webhook answered 503", RetryIn: time.Minute,
		CallStartedAt: began, CallFinishedAt: began.Add(time.Second), ProviderCalled: true, HTTPStatus: 503}
	if got, err := b.store.Record(ctx, []outbox.Outcome{failed}); err != nil || len(got.IDs) != 0 {
		t.Fatalf("stale token recorded: %v %v", got, err)
	}
	if n := b.f.Count(t, `select count(*) from external_integration_attempts`); n != 0 {
		t.Fatalf("a refused result left %d attempt rows", n)
	}
	failed.ClaimToken = c.ClaimToken
	if got, err := b.store.Record(ctx, []outbox.Outcome{failed}); err != nil || len(got.IDs) != 1 {
		t.Fatalf("record = %v, %v", got, err)
	}
	if n := b.f.Count(t, `select count(*) from external_integration_attempts
		where outbox_id = $1 and organization_id = $2 and attempt = 1 and outcome = 'failed' and provider_called
		  and http_status = 503 and error_excerpt = 'webhook answered 503'
		  and abs(extract(epoch from started_at) - $3::float8) < 0.001
		  and finished_at - started_at = interval '1 second'`, id, b.org, float64(began.UnixMicro())/1e6); n != 1 {
		t.Errorf("%d matching attempt rows, want 1", n)
	}
}

// TestTheStatementsWorkWithoutTheirRoutines: a build deployed before make
// migrate installed its routines (or after one was dropped) sends every
// statement plain, through a pool configured as the functions' (unnamed
// statements): the idle check, the sweep, a claim (its transaction set up
// by claim_setup.sql), the start and the record deliver a command, and the
// claim's settings last only its transaction.
func TestTheStatementsWorkWithoutTheirRoutines(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.f.Pool.Exec(ctx, sqlroutine.DropAllSQL); err != nil {
		t.Fatal(err)
	}
	pool := testenv.OpenPool(t, b.f.URL, func(cfg *pgxpool.Config) { pgtx.Configure(cfg.ConnConfig); cfg.MaxConns = 1 })
	store := outbox.NewStore(pool)
	id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.po})
	if idle, err := store.Idle(ctx, params(1)); err != nil || idle {
		t.Fatalf("Idle = %v, %v; want false", idle, err)
	}
	if _, err := store.Sweep(ctx, params(1)); err != nil {
		t.Fatal(err)
	}
	claims, err := store.Claim(ctx, params(1))
	if err != nil || len(claims) != 1 || claims[0].ID != id {
		t.Fatalf("Claim = %v, %v; want the command", claims, err)
	}
	jobs, err := store.Start(ctx, []outbox.StartRequest{{OutboxID: id, OrganizationID: b.org, ConnectionID: b.conn, ClaimToken: claims[0].ClaimToken}})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("Start = %v, %v; want the job", jobs, err)
	}
	got, err := store.Record(ctx, []outbox.Outcome{{OutboxID: id, OrganizationID: b.org, ConnectionID: b.conn,
		ClaimToken: claims[0].ClaimToken, Status: "completed", ProviderReference: "ref-1"}})
	if err != nil || len(got.IDs) != 1 {
		t.Fatalf("Record = %v, %v; want the row", got, err)
	}
	var status, bitmap string
	if err := pool.QueryRow(ctx, `select (select status::text from external_integration_outbox where id = $1),
		current_setting('enable_bitmapscan')`, id).Scan(&status, &bitmap); err != nil {
		t.Fatal(err)
	}
	if status != "completed" || bitmap != "on" {
		t.Errorf("status %q, enable_bitmapscan %q after the claim; want completed, and on (the claim's setting ended with its transaction)", status, bitmap)
	}
	if n := b.f.Count(t, `select count(*) from pg_proc where proname like 'integration\_outbox\_sql\_%'`); n != 0 {
		t.Errorf("%d routines appeared: this test did not run the statements plain", n)
	}
}
