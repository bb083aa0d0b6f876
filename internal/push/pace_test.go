package push_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/pace"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/push"
	"integration-outbox/internal/testenv"
)

// limitedProvider is a provider with per-connection limits whose every call
// answers what answer says.
type limitedProvider struct {
	limits provider.Limits
	calls  atomic.Int64
	answer func() (provider.Result, error)
}

func (*limitedProvider) Name() string { return "limited" }

func (p *limitedProvider) Limits(provider.Connection) provider.Limits { return p.limits }

func (p *limitedProvider) PushPurchaseOrder(context.Context, provider.Connection, credential.Credential,
	provider.PurchaseOrderPush) (provider.Result, error) {
	p.calls.Add(1)
	return p.answer()
}

// limitedWorkers sets up n containers' workers on one database with p.
func limitedWorkers(t *testing.T, p *limitedProvider, n int, paceMaxWait time.Duration) (bundle, []*push.Worker) {
	t.Helper()
	f := pg.NewDB(t)
	var workers []*push.Worker
	for range n {
		pool := testenv.OpenPool(t, f.URL, nil)
		w, err := push.New(outbox.NewStore(pool), nil, purchaseorder.NewCommand(pool), push.Config{
			Logger: slog.New(slog.DiscardHandler), Providers: provider.NewRegistry(p),
			MaxAttempts: 10, ProviderTimeout: 2 * time.Second, Jitter: func() float64 { return 0 },
			Pacer: pace.NewPacer(pool), PaceMaxWait: paceMaxWait,
		})
		if err != nil {
			t.Fatal(err)
		}
		workers = append(workers, w)
	}
	return bundle{f: f, store: outbox.NewStore(f.Pool), worker: workers[0], org: f.NewID(t)}, workers
}

func (b bundle) limitedCommands(t *testing.T, n int) (conn string, ids []string) {
	t.Helper()
	conn = b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: b.org, Provider: "limited"})
	for range n {
		po := b.f.PurchaseOrder(t, b.org, "", 1)
		ids = append(ids, b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: conn,
			Provider: "limited", EntityID: po}))
	}
	return conn, ids
}

// A 429 that tells the connection to slow down pauses it for every
// container until its Retry-After, without charging the attempt: no claim
// takes its rows meanwhile, and afterwards they are delivered.
func TestA429PausesTheConnectionForTheFleetWithoutChargingAttempts(t *testing.T) {
	t.Parallel()
	var limited atomic.Bool
	limited.Store(true)
	p := &limitedProvider{limits: provider.Limits{MaxInFlight: 5, CallsPerMinute: 600}, answer: func() (provider.Result, error) {
		if limited.Load() {
			return provider.Result{}, &provider.Error{Kind: provider.Retryable, StatusCode: 429, RetryAfter: 30 * time.Second,
				PauseConnection: true, Message: "limited answered 429 (X-Rate-Limit-Problem: minute)"}
		}
		return provider.Result{Status: provider.StatusCompleted, ExternalID: "PO-1", StatusCode: 200}, nil
	}}
	b, workers := limitedWorkers(t, p, 2, 5*time.Second)
	conn, ids := b.limitedCommands(t, 3)
	b.handle(t, b.claim(t, 1)) // the first row, alone: its 429 pauses the connection
	if got := p.calls.Load(); got != 1 {
		t.Fatalf("%d calls, want 1", got)
	}
	first := b.f.Row(t, ids[0])
	if first.Status != "failed" || first.AttemptCount != 0 || first.RetryInSeconds == nil || *first.RetryInSeconds < 25 {
		t.Fatalf("the row answered 429 is %s at attempt %d, due in %v s; want failed at 0, due in about 30 s",
			first.Status, first.AttemptCount, first.RetryInSeconds)
	}
	var pausedFor float64
	if err := b.f.Pool.QueryRow(context.Background(), `select extract(epoch from paused_until - now())
		from integration_outbox_connection_pace where connection_id = $1`, conn).Scan(&pausedFor); err != nil {
		t.Fatal(err)
	}
	if pausedFor < 25 || pausedFor > 31 {
		t.Errorf("the connection is paused for %.0f s, want the Retry-After of 30 s", pausedFor)
	}
	// Every container: nothing of the connection is claimed during the pause.
	if ev := b.claim(t, 10); len(ev.Records) != 0 {
		t.Fatalf("claimed %d rows of a paused connection", len(ev.Records))
	}

	// The pause over, the rows go, each charged its one real attempt.
	limited.Store(false)
	for _, stmt := range []string{
		`update integration_outbox_connection_pace set paused_until = now() - interval '1 second' where connection_id = $1`,
		`update external_integration_outbox set next_attempt_at = now() - interval '1 second' where integration_connection_id = $1`,
	} {
		if _, err := b.f.Pool.Exec(context.Background(), stmt, conn); err != nil {
			t.Fatal(err)
		}
	}
	ev := b.claim(t, 10)
	if _, err := workers[1].Handle(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if r := b.f.Row(t, id); r.Status != "completed" || r.AttemptCount != 1 {
			t.Errorf("row %s is %s at attempt %d, want completed at 1", id, r.Status, r.AttemptCount)
		}
	}
}

// A job whose connection's next call slot is further off than it may wait
// goes back to the outbox, due at that slot, its attempt not charged; the
// provider is not called for it.
func TestAJobBeyondItsConnectionsPaceGoesBackUncharged(t *testing.T) {
	t.Parallel()
	p := &limitedProvider{limits: provider.Limits{MaxInFlight: 5, CallsPerMinute: 1}, answer: func() (provider.Result, error) {
		return provider.Result{Status: provider.StatusCompleted, ExternalID: "PO-1", StatusCode: 200}, nil
	}}
	b, _ := limitedWorkers(t, p, 1, time.Second)
	_, ids := b.limitedCommands(t, 2)
	b.handle(t, b.claim(t, 10))
	if got := p.calls.Load(); got != 1 {
		t.Fatalf("%d calls within the minute, the limit allows 1", got)
	}
	var done, back int
	for _, id := range ids {
		r := b.f.Row(t, id)
		switch {
		case r.Status == "completed" && r.AttemptCount == 1:
			done++
		case r.Status == "failed" && r.AttemptCount == 0 && r.RetryInSeconds != nil && *r.RetryInSeconds > 50:
			back++
		default:
			t.Errorf("row %s is %s at attempt %d, due in %v s", id, r.Status, r.AttemptCount, r.RetryInSeconds)
		}
	}
	if done != 1 || back != 1 {
		t.Errorf("%d delivered and %d sent back for the next slot, want 1 and 1", done, back)
	}
}

// pauseWatch is a push.Pacer that marks when a pause has been written.
type pauseWatch struct {
	*pace.Pacer
	written *atomic.Bool
}

func (p pauseWatch) Pause(ctx context.Context, c pace.Connection, until time.Time, reason string) error {
	err := p.Pacer.Pause(ctx, c, until, reason)
	p.written.Store(err == nil)
	return err
}

// Four containers push eight commands of one connection whose calls are
// paced half a second apart; the third call (a second in) is answered 429
// with a Retry-After of 30 s. The five others had taken their slots ahead
// (up to 3.5 s off) and sleep to them: none of them may call once the
// pause is written, and each gives its row back uncharged, due when the
// pause ends.
func TestNoCallStartsInsideA429PauseAcrossFourContainers(t *testing.T) {
	t.Parallel()
	var (
		written atomic.Bool
		inside  atomic.Int64 // calls that started once the pause was written
		calls   atomic.Int64
	)
	p := &limitedProvider{limits: provider.Limits{MaxInFlight: 10, CallsPerMinute: 120}, answer: func() (provider.Result, error) {
		if written.Load() {
			inside.Add(1)
		}
		if calls.Add(1) == 3 {
			return provider.Result{}, &provider.Error{Kind: provider.Retryable, StatusCode: 429, RetryAfter: 30 * time.Second,
				PauseConnection: true, Message: "limited answered 429 (X-Rate-Limit-Problem: minute)"}
		}
		return provider.Result{Status: provider.StatusCompleted, ExternalID: "PO-1", StatusCode: 200}, nil
	}}
	f := pg.NewDB(t)
	var workers []*push.Worker
	for range 4 {
		pool := testenv.OpenPool(t, f.URL, nil)
		w, err := push.New(outbox.NewStore(pool), nil, purchaseorder.NewCommand(pool), push.Config{
			Logger: slog.New(slog.DiscardHandler), Providers: provider.NewRegistry(p),
			MaxAttempts: 10, ProviderTimeout: 2 * time.Second, Jitter: func() float64 { return 0 },
			Pacer: pauseWatch{Pacer: pace.NewPacer(pool), written: &written}, PaceMaxWait: 20 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		workers = append(workers, w)
	}
	b := bundle{f: f, store: outbox.NewStore(f.Pool), worker: workers[0], org: f.NewID(t)}
	_, ids := b.limitedCommands(t, 8)
	ev := b.claim(t, 8)
	if len(ev.Records) != 8 {
		t.Fatalf("claimed %d rows, want 8", len(ev.Records))
	}
	var wg sync.WaitGroup
	for i, w := range workers {
		part := events.SQSEvent{Records: ev.Records[2*i : 2*i+2]}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := w.Handle(context.Background(), part); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := inside.Load(); n != 0 {
		t.Errorf("%d calls started after the 429's pause was written, inside it; want 0", n)
	}
	if n := p.calls.Load(); n != 3 {
		t.Errorf("%d calls, want 3: two delivered, then the one answered 429", n)
	}
	var completed, back int
	for _, id := range ids {
		r := b.f.Row(t, id)
		switch {
		case r.Status == "completed" && r.AttemptCount == 1:
			completed++
		case r.Status == "failed" && r.AttemptCount == 0 && r.RetryInSeconds != nil && *r.RetryInSeconds > 20:
			back++
		default:
			t.Errorf("row %s is %s at attempt %d, due in %v s; want completed, or failed uncharged and due at the pause's end",
				id, r.Status, r.AttemptCount, r.RetryInSeconds)
		}
	}
	if completed != 2 || back != 6 {
		t.Errorf("%d rows delivered and %d given back for the pause's end, want 2 and 6", completed, back)
	}
}

// Xero's daily limit used up (a 429 with X-Rate-Limit-Problem: day) pauses
// the connection until the limit resets, however far off, for the fleet:
// two containers answered at once open one connection_limit_reached
// conflict saying until when, the rows go back uncharged, due then, and no
// claim takes them meanwhile. Once the pause has ended, the dispatch run's
// ResolveEndedLimits resolves the conflict.
func TestADailyLimitPausesTheConnectionUntilItResetsWithOneConflict(t *testing.T) {
	t.Parallel()
	p := &limitedProvider{limits: provider.Limits{MaxInFlight: 10, CallsPerMinute: 6000}, answer: func() (provider.Result, error) {
		return provider.Result{}, &provider.Error{Kind: provider.Retryable, StatusCode: 429, RetryAfter: 14 * time.Hour,
			PauseConnection: true, DailyLimit: true,
			Message: "xero's daily call limit of the tenant is used up (X-DayLimit-Remaining: 0): xero answered 429 (rate limit: day)"}
	}}
	b, workers := limitedWorkers(t, p, 2, 5*time.Second)
	conn, ids := b.limitedCommands(t, 4)
	ev := b.claim(t, 4)
	if len(ev.Records) != 4 {
		t.Fatalf("claimed %d rows, want 4", len(ev.Records))
	}
	var wg sync.WaitGroup
	for i, w := range workers {
		part := events.SQSEvent{Records: ev.Records[2*i : 2*i+2]}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := w.Handle(context.Background(), part); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		r := b.f.Row(t, id)
		if r.Status != "failed" || r.AttemptCount != 0 || r.RetryInSeconds == nil || *r.RetryInSeconds < 13*3600 {
			t.Errorf("row %s is %s at attempt %d, due in %v s; want failed, uncharged, due in about 14 h", id, r.Status, r.AttemptCount, r.RetryInSeconds)
		}
	}
	ctx := context.Background()
	type conflict struct{ status, severity, summary, entity string }
	read := func() []conflict {
		rows, err := b.f.Pool.Query(ctx, `select status::text, severity::text, summary, local_entity_type::text
			from external_integration_conflicts where integration_connection_id = $1 and conflict_type = 'connection_limit_reached'`, conn)
		if err != nil {
			t.Fatal(err)
		}
		var out []conflict
		for rows.Next() {
			var c conflict
			if err := rows.Scan(&c.status, &c.severity, &c.summary, &c.entity); err != nil {
				t.Fatal(err)
			}
			out = append(out, c)
		}
		return out
	}
	got := read()
	if len(got) != 1 || got[0].status != "open" || got[0].entity != "integration_connection" ||
		!strings.Contains(got[0].summary, "limited's daily limit is used up until ") {
		t.Fatalf("conflicts = %+v, want one open connection_limit_reached saying until when", got)
	}
	if ev := b.claim(t, 10); len(ev.Records) != 0 {
		t.Fatalf("claimed %d rows of a connection whose daily limit is used up", len(ev.Records))
	}
	pacer := pace.NewPacer(b.f.Pool)
	if n, err := pacer.ResolveEndedLimits(ctx); err != nil || n != 0 {
		t.Fatalf("resolved %d during the pause (%v), want 0", n, err)
	}
	if _, err := b.f.Pool.Exec(ctx, `update integration_outbox_connection_pace set paused_until = now() - interval '1 second'
		where connection_id = $1`, conn); err != nil {
		t.Fatal(err)
	}
	if n, err := pacer.ResolveEndedLimits(ctx); err != nil || n != 1 {
		t.Fatalf("resolved %d after the pause (%v), want 1", n, err)
	}
	if got := read(); len(got) != 1 || got[0].status != "resolved" {
		t.Errorf("conflicts after the reset = %+v, want the one resolved", got)
	}
}
