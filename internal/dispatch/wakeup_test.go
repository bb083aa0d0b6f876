package dispatch_test

// The host wakes the dispatcher right after its commit with an asynchronous
// invoke carrying {"organizationId": "…"} (docs/producers.md). These tests run
// the real dispatcher on that event: many wake-ups at once are safe (every row
// claimed and sent once, no errors) and cheap (bounded work per run).

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/sqlroutine"
	"integration-outbox/internal/testenv"
)

// statementCounter counts the statements a pool sends and, while record
// is set, keeps their text.
type statementCounter struct {
	n      atomic.Int64
	record atomic.Bool
	mu     sync.Mutex
	sent   []string
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	if c.record.Load() {
		c.mu.Lock()
		c.sent = append(c.sent, data.SQL)
		c.mu.Unlock()
	}
	return ctx
}

// take returns the statements recorded since the last take, each by its
// outbox name ("outbox/idle", also when it runs through its routine) or,
// for any other, "other", and starts a new
// record and count.
func (c *statementCounter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for _, sql := range c.sent {
		if sql == sqlroutine.ReadSQL {
			continue // which routines the database has: once a container
		}
		name := "other"
		for _, s := range outbox.Statements() {
			if strings.TrimSpace(sql) == strings.TrimSpace(s.SQL) {
				name = s.Name
				break
			}
		}
		for _, r := range outbox.Routines() {
			if sql == r.Call() {
				name = r.Name
			}
		}
		names = append(names, name)
	}
	c.sent = nil
	c.n.Store(0)
	return names
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// countingDispatcher is a dispatcher whose store's pool counts its statements.
func (b bundle) countingDispatcher(t testing.TB, batch, maxPerRun int) (*dispatch.Dispatcher, *statementCounter) {
	t.Helper()
	counter := &statementCounter{}
	pool := testenv.OpenPool(t, b.f.URL, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.Tracer = counter
		cfg.MaxConns = 4 // what one dispatch container opens
	})
	d, err := dispatch.New(outbox.NewStore(pool), b.sqs, dispatch.Config{
		Routes: dispatch.Routes{"push_purchase_order": b.queue}, BatchSize: batch, MaxPerRun: maxPerRun,
		MaxAttempts: 10, Lease: 15 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return d, counter
}

func wakeEvent(org string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"organizationId": %q}`, org))
}

func TestConcurrentWakeUpsClaimEveryRowOnceWithBoundedRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.commands(t, 60, testenv.CommandOpts{})
	other := b.f.NewID(t)
	otherRow := b.f.Command(t, testenv.CommandOpts{OrganizationID: other,
		ConnectionID: b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: other}), EntityID: b.po})

	const wakeUps, maxPerRun = 20, 10
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		summaries  []dispatch.Summary
		statements []int64
	)
	start := make(chan struct{})
	for i := range wakeUps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each wake-up is its own container: its own pool of 4.
			d, counter := b.countingDispatcher(t, 5, maxPerRun)
			<-start
			s, err := d.Handle(context.Background(), wakeEvent(b.org))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("wake-up %d: %v", i, err)
			}
			summaries = append(summaries, s)
			statements = append(statements, counter.n.Load())
		}()
	}
	close(start)
	wg.Wait()

	t.Logf("%d concurrent wake-ups: claims %v, statements %v", wakeUps, claimsOf(summaries), statements)
	claimed := 0
	for _, s := range summaries {
		if s.Claimed > maxPerRun || s.Dispatched != s.Claimed || s.Released != 0 {
			t.Errorf("a wake-up did %+v, want at most %d claims, all dispatched", s, maxPerRun)
		}
		claimed += s.Claimed
	}
	// Runs racing for the same rows may stop early (a short batch reads as
	// "nothing left"); a later wake-up or the schedule takes the rest.
	d, _ := b.countingDispatcher(t, 50, 5000)
	rest, err := d.Handle(context.Background(), wakeEvent(b.org))
	if err != nil {
		t.Fatal(err)
	}
	if claimed+rest.Claimed != len(ids) {
		t.Errorf("wake-ups claimed %d, the follow-up run %d, want %d in all", claimed, rest.Claimed, len(ids))
	}
	perRow := map[string]int{}
	for _, m := range b.receiveAll(t) {
		perRow[m.OutboxID]++
		if m.OrganizationID != b.org {
			t.Errorf("a wake-up for %s sent a row of %s", b.org, m.OrganizationID)
		}
	}
	for _, id := range ids {
		if perRow[id] != 1 {
			t.Errorf("row %s sent %d times, want once", id, perRow[id])
		}
		if r := b.f.Row(t, id); r.Status != "processing" || r.AttemptCount != 1 {
			t.Errorf("row %s: %s after %d attempts, want processing after 1", id, r.Status, r.AttemptCount)
		}
	}
	if r := b.f.Row(t, otherRow); r.Status != "queued" || r.AttemptCount != 0 {
		t.Errorf("another organization's row was touched: %+v", r)
	}
}

// idleWakeUpStatementBound is the most statements a wake-up that finds nothing
// due may cost (it costs 1 today: the idle check).
const idleWakeUpStatementBound = 6

func TestWakeUpWithNothingDueIsAFewStatements(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Plenty of work for another organization and finished rows for this one.
	other := b.f.NewID(t)
	otherConn := b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: other})
	for range 30 {
		b.f.Command(t, testenv.CommandOpts{OrganizationID: other, ConnectionID: otherConn, EntityID: b.po})
	}
	b.commands(t, 10, testenv.CommandOpts{Status: "completed"})
	d, counter := b.countingDispatcher(t, 50, 5000)
	for range 3 {
		counter.n.Store(0)
		s, err := d.Handle(context.Background(), wakeEvent(b.org))
		if err != nil {
			t.Fatal(err)
		}
		if s != (dispatch.Summary{}) {
			t.Errorf("idle wake-up did %+v", s)
		}
		if n := counter.n.Load(); n > idleWakeUpStatementBound {
			t.Errorf("idle wake-up sent %d statements, want at most %d", n, idleWakeUpStatementBound)
		} else {
			t.Logf("idle wake-up: %d statements", n)
		}
	}
	if n := b.f.Count(t, `select count(*) from external_integration_outbox where organization_id = $1 and status = 'queued'`, other); n != 30 {
		t.Errorf("a wake-up for one organization touched another's rows: %d of 30 still queued", n)
	}
}

// BenchmarkWakeUp measures one wake-up invocation's handler (not the Lambda
// invoke around it): statements sent and time, with nothing due and with the
// one row the host just enqueued.
func BenchmarkWakeUp(b *testing.B) {
	for _, due := range []int{0, 1} {
		b.Run(fmt.Sprintf("due=%d", due), func(bb *testing.B) {
			env := setupBench(bb)
			d, counter := env.countingDispatcher(bb, 50, 5000)
			ctx := context.Background()
			var statements int64
			for bb.Loop() {
				if due > 0 {
					bb.StopTimer()
					// An order of its own: the last run's command is still in
					// flight, and per-entity order would hold one of its order.
					po := env.f.PurchaseOrder(bb, env.org, "", 1)
					env.f.Command(bb, testenv.CommandOpts{OrganizationID: env.org, ConnectionID: env.conn, EntityID: po})
					bb.StartTimer()
				}
				counter.n.Store(0)
				s, err := d.Handle(ctx, wakeEvent(env.org))
				if err != nil || s.Claimed != due {
					bb.Fatalf("wake-up: %+v %v", s, err)
				}
				statements += counter.n.Load()
			}
			bb.ReportMetric(float64(statements)/float64(bb.N), "statements/op")
		})
	}
}

// setupBench is setup for a test or a benchmark: a fresh database and
// queue, and one organization with a connection and a purchase order.
func setupBench(tb testing.TB) bundle {
	tb.Helper()
	f := pg.NewDB(tb)
	client := sqs.NewFromConfig(moto.AWSConfig())
	queue := testenv.CreateQueue(tb, client, nil)
	org := f.NewID(tb)
	return bundle{f: f, sqs: client, queue: queue, org: org,
		conn: f.Connection(tb, testenv.ConnectionOpts{OrganizationID: org}), po: f.PurchaseOrder(tb, org, "", 1)}
}

func claimsOf(ss []dispatch.Summary) []int {
	out := make([]int, len(ss))
	for i, s := range ss {
		out[i] = s.Claimed
	}
	return out
}

// A run that finds no row queued, failed or in flight and no forgotten
// start sends its idle check and nothing else: the sweep, whose parse and
// plan on a new connection (a cold start) are most of an idle run's cost,
// is skipped with the claim. A wake-up of an organization with
// nothing to do skips them too while another organization's rows wait.
// Each kind of row the sweep or a claim acts on makes the run send the
// sweep, and the sweep acts on it: a forgotten start (deleted, no claim), a
// leased row with no attempt left (dead-lettered), a row waiting for one
// that ended without waking it (made due, claimed and sent), a queued row
// (claimed and sent).
func TestAnIdleRunSendsOnlyItsIdleCheck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	d, counter := b.countingDispatcher(t, 5, 50)
	counter.record.Store(true)
	const idle, sweep = "outbox/idle", "outbox/dead_letter_expired"
	run := func(what string, event json.RawMessage) (dispatch.Summary, []string) {
		t.Helper()
		counter.take()
		s, err := d.Handle(ctx, event)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return s, counter.take()
	}
	if s, sent := run("idle run", json.RawMessage(`{}`)); s != (dispatch.Summary{}) || !slices.Equal(sent, []string{idle}) {
		t.Errorf("an idle run = %+v and sent %v; want nothing done and only %s", s, sent, idle)
	}
	other := b.f.NewID(t)
	b.f.Command(t, testenv.CommandOpts{OrganizationID: other,
		ConnectionID: b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: other}), EntityID: b.po})
	if s, sent := run("wake-up of an idle organization", wakeEvent(b.org)); s != (dispatch.Summary{}) || !slices.Equal(sent, []string{idle}) {
		t.Errorf("the wake-up of an idle organization = %+v and sent %v; want nothing done and only %s", s, sent, idle)
	}

	// A forgotten start (a push that crashed before its record, eleven
	// minutes ago): the sweep deletes it; nothing to claim.
	done := b.commands(t, 1, testenv.CommandOpts{Status: "completed", AttemptCount: 1})[0]
	if _, err := b.f.Pool.Exec(ctx, `insert into integration_outbox_starts (claim_token, outbox_id, organization_id, started_at, created_at)
		values (gen_random_uuid(), $1, $2, now() - interval '11 minutes', now() - interval '11 minutes')`, done, b.org); err != nil {
		t.Fatal(err)
	}
	if s, sent := run("a forgotten start", wakeEvent(b.org)); s != (dispatch.Summary{}) || !slices.Equal(sent, []string{idle, sweep}) {
		t.Errorf("a run with a forgotten start = %+v and sent %v; want nothing claimed, %s then %s", s, sent, idle, sweep)
	}
	if n := b.f.Count(t, `select count(*) from integration_outbox_starts`); n != 0 {
		t.Errorf("%d starts left, want the forgotten one deleted", n)
	}

	// A leased row whose lease expired after its last attempt: the sweep
	// ends it.
	exhausted := b.commands(t, 1, testenv.CommandOpts{Status: "processing", AttemptCount: 10})[0]
	if _, err := b.f.Pool.Exec(ctx, `update external_integration_outbox set claim_token = gen_random_uuid(),
		lease_expires_at = now() - interval '1 minute', started_at = now() - interval '2 minutes' where id = $1`, exhausted); err != nil {
		t.Fatal(err)
	}
	if _, sent := run("an exhausted row", wakeEvent(b.org)); len(sent) < 2 || sent[0] != idle || sent[1] != sweep {
		t.Errorf("a run with an exhausted row sent %v; want %s then %s first", sent, idle, sweep)
	}
	if r := b.f.Row(t, exhausted); r.Status != "dead_letter" {
		t.Errorf("the exhausted row is %s after the run, want dead_letter", r.Status)
	}

	// A row waiting for another that ended without waking it (not due for
	// an hour; the race of two records): the sweep makes it due, and the
	// run claims and sends it.
	later := time.Now().Add(time.Hour)
	waiting := b.commands(t, 1, testenv.CommandOpts{Status: "failed", NextAttemptAt: &later})[0]
	if _, err := b.f.Pool.Exec(ctx, `update external_integration_outbox set waiting_for_outbox_id = $1 where id = $2`,
		done, waiting); err != nil {
		t.Fatal(err)
	}
	s, sent := run("a waiting row", wakeEvent(b.org))
	if s.Claimed != 1 || s.Dispatched != 1 || len(sent) < 3 || sent[0] != idle || sent[1] != sweep || !slices.Contains(sent, "outbox/claim_scheduled") {
		t.Errorf("a run with a row waiting for an ended one = %+v and sent %v; want it claimed and sent after %s, %s, then the claim", s, sent, idle, sweep)
	}

	ids := b.commands(t, 1, testenv.CommandOpts{})
	s, sent = run("a queued row", wakeEvent(b.org))
	if s.Claimed != 1 || s.Dispatched != 1 {
		t.Fatalf("run with %v queued = %+v", ids, s)
	}
	if len(sent) < 3 || sent[0] != idle || sent[1] != sweep || !slices.Contains(sent, "outbox/claim_scheduled") {
		t.Errorf("a run that claims sent %v; want %s, %s, then the claim", sent, idle, sweep)
	}
}
