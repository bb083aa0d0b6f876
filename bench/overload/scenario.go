// Package overload drives the real dispatcher and push worker against a real
// PostgreSQL under overload and outages, time scaled down: a simulated SQS
// queue between them, a simulated provider behind them, and EventBridge's
// schedule played by a ticker. Its tests (run by `make test`, which tests
// the bench module too) run small scenarios and assert their invariants;
// `make bench` runs the full-size scenarios and prints the figures for
// today's settings and the new ones (bench/results.md).
//
// It is a measuring harness, not part of any function: it lives in the bench
// module so that nothing of it reaches the Lambdas' build.
package overload

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"integration-outbox/internal/backoff"
	"integration-outbox/internal/config"
	"integration-outbox/internal/credential"
	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/push"
)

// Mode is how a simulated provider endpoint answers.
type Mode int

const (
	// Healthy answers 200 after the latency.
	Healthy Mode = iota
	// Down answers 503 after the latency.
	Down
	// Hanging never answers: the call runs into the provider timeout.
	Hanging
)

// Tenant is one organization with one connection.
type Tenant struct {
	Name string
	Rows int
	// After is when (simulated) its rows are queued; 0: at the start.
	After time.Duration
	Mode  Mode
}

// Settings are the dispatcher and worker settings a scenario runs with.
type Settings struct {
	Name string
	// Legacy claims with the statement that ran before the in-flight caps
	// (one global created_at order, no caps).
	Legacy                bool
	MaxInFlight           int
	ConnectionMaxInFlight int
	CircuitThreshold      int
	CircuitCooldown       time.Duration // simulated
}

// Today is the behaviour before the in-flight caps: no caps, no breaker, one
// global order (the lease-at-start fix is in both).
func Today() Settings { return Settings{Name: "today", Legacy: true} }

// Defaults are the new defaults for a push side of consumers x batch:
// DISPATCH_MAX_IN_FLIGHT 2 x consumers x batch, CONNECTION_MAX_IN_FLIGHT 10,
// CIRCUIT_FAILURE_THRESHOLD 5, CIRCUIT_COOLDOWN 60s.
func Defaults(consumers, batch int) Settings {
	return Settings{Name: "new defaults", MaxInFlight: 2 * consumers * batch, ConnectionMaxInFlight: 10,
		CircuitThreshold: 5, CircuitCooldown: time.Minute}
}

// Scenario is one simulated workload. Durations are simulated; Scale maps
// them to real time.
type Scenario struct {
	Name    string
	Tenants []Tenant
	// Scale is real time per simulated time (0.01: a simulated minute lasts
	// 0.6 s).
	Scale           float64
	Consumers       int           // concurrent push invocations
	BatchSize       int           // SQS records per invocation
	Latency         time.Duration // of every provider answer
	ProviderTimeout time.Duration
	Lease           time.Duration
	DispatchEvery   time.Duration // the schedule
	MaxPerRun       int           // DISPATCH_MAX_PER_RUN
	ClaimBatch      int           // CLAIM_BATCH_SIZE
	// Until ends the run (simulated); it ends earlier once every row of a
	// healthy tenant is completed and HealthyOnly is set.
	Until       time.Duration
	HealthyOnly bool
}

func (sc Scenario) real(d time.Duration) time.Duration {
	return time.Duration(float64(d) * sc.Scale)
}

func (sc Scenario) sim(d time.Duration) time.Duration {
	return time.Duration(float64(d) / sc.Scale)
}

// TenantResult is what one tenant saw (simulated durations).
type TenantResult struct {
	Rows, Completed, DeadLettered, Attempts int
	Calls, MaxConcurrent                    int
	// Wait is the time from a row's queueing to its first success: p50,
	// p95, max over the rows that got one.
	WaitP50, WaitP95, WaitMax time.Duration
}

// Result is what a run measured.
type Result struct {
	Scenario, Settings string
	Rows               int
	Messages           int // SQS messages sent
	Attempts           int // sum of attempt_count
	// LeasesExpired counts leases that ran out before their row was
	// started: reclaimed by a claim, or dead-lettered by the sweep.
	LeasesExpired                   int
	Calls                           int // provider calls
	RowsCalledTwice, MaxCallsPerRow int
	Completed, DeadLettered         int
	// WaitP50 and WaitP95: time to first success over the healthy rows.
	WaitP50, WaitP95 time.Duration
	Tenants          map[string]TenantResult
	Took             time.Duration // real
}

// PerRow divides n by the rows.
func (r Result) PerRow(n int) float64 {
	if r.Rows == 0 {
		return 0
	}
	return float64(n) / float64(r.Rows)
}

// Run plays sc with st on the migrated, empty database at url.
func Run(ctx context.Context, url string, sc Scenario, st Settings) (Result, error) {
	began := time.Now()
	sc.ClaimBatch = cmp.Or(sc.ClaimBatch, 50)
	sc.MaxPerRun = cmp.Or(sc.MaxPerRun, 5000)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return Result{}, err
	}
	cfg.MaxConns = int32(4 + 2*sc.Consumers)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	defer pool.Close()

	prov := newSimProvider(sc)
	tenants := map[string]*tenantIDs{}
	for _, t := range sc.Tenants {
		var ids tenantIDs
		if err := pool.QueryRow(ctx, tenantSQL).Scan(&ids.org, &ids.conn, &ids.po); err != nil {
			return Result{}, fmt.Errorf("creating tenant %s: %w", t.Name, err)
		}
		tenants[t.Name] = &ids
		prov.tenant[ids.conn] = t
	}

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("OVERLOAD_DEBUG") != "" {
		quiet = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	queue := newSimQueue()
	// One breaker setting for the claim and the record, as the functions
	// have it.
	outboxStore := outbox.NewStore(pool).WithCircuit(outbox.Circuit{
		FailureThreshold: st.CircuitThreshold, Cooldown: sc.real(st.CircuitCooldown)})
	store := &countingStore{Store: outboxStore, pool: pool, legacy: st.Legacy}
	d, err := dispatch.New(store, queue, dispatch.Config{
		Routes: dispatch.Routes{purchaseorder.CommandType: "sim"}, BatchSize: sc.ClaimBatch, MaxPerRun: sc.MaxPerRun,
		MaxAttempts: config.DefaultMaxAttempts, Lease: sc.real(sc.Lease), Reserve: sc.real(10 * time.Second),
		RoomWait: sc.real(250 * time.Millisecond), MaxInFlight: st.MaxInFlight, ConnectionMaxInFlight: st.ConnectionMaxInFlight,
		Logger: quiet})
	if err != nil {
		return Result{}, err
	}
	w, err := push.New(outboxStore, noCredentials{},
		purchaseorder.NewCommand(pool), push.Config{
			Providers: provider.Registry{"sim": prov}, Concurrency: 10, MaxAttempts: config.DefaultMaxAttempts,
			ProviderTimeout: sc.real(sc.ProviderTimeout), RecordReserve: sc.real(3 * time.Second), Logger: quiet,
			RetryDelay: func(attempts int, retryAfter time.Duration, jitter float64) time.Duration {
				return sc.real(backoff.Delay(attempts, retryAfter, jitter))
			}})
	if err != nil {
		return Result{}, err
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	// Queue the tenants' rows, each at its time.
	for _, t := range sc.Tenants {
		wg.Go(func() {
			if !sleep(runCtx, sc.real(t.After)) {
				return
			}
			ids := tenants[t.Name]
			prov.queued(t.Name, time.Now())
			if _, err := pool.Exec(runCtx, rowsSQL, ids.org, ids.conn, ids.po, t.Rows, t.Name+":"); err != nil && runCtx.Err() == nil {
				errs <- fmt.Errorf("queueing %s: %w", t.Name, err)
			}
		})
	}
	// The push side: Consumers invocations at a time, BatchSize records each.
	for range sc.Consumers {
		wg.Go(func() {
			for runCtx.Err() == nil {
				msgs := queue.receive(runCtx, sc.BatchSize, sc.real(time.Second))
				if len(msgs) == 0 {
					continue
				}
				ev := events.SQSEvent{}
				for _, m := range msgs {
					ev.Records = append(ev.Records, events.SQSMessage{MessageId: m.id, Body: m.body})
				}
				ictx, cancel := context.WithTimeout(context.WithoutCancel(runCtx), sc.real(60*time.Second))
				resp, err := w.Handle(ictx, ev)
				cancel()
				if err != nil {
					errs <- err
					return
				}
				failed := map[string]bool{}
				for _, f := range resp.BatchItemFailures {
					failed[f.ItemIdentifier] = true
				}
				for _, m := range msgs {
					if failed[m.id] {
						queue.put(m)
					}
				}
			}
		})
	}
	// The schedule: a dispatch run every DispatchEvery, each with a Lambda's
	// 60 s; runs may overlap as EventBridge's do.
	wg.Go(func() {
		for {
			wg.Go(func() {
				rctx, cancel := context.WithTimeout(runCtx, sc.real(60*time.Second))
				defer cancel()
				if _, err := d.Run(rctx, dispatch.Request{}); err != nil && runCtx.Err() == nil &&
					!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
					errs <- fmt.Errorf("dispatch: %w", err)
				}
			})
			if !sleep(runCtx, sc.real(sc.DispatchEvery)) {
				return
			}
		}
	})
	// The end: Until, or every healthy row completed.
	healthy := 0
	for _, t := range sc.Tenants {
		if t.Mode == Healthy {
			healthy += t.Rows
		}
	}
	deadline := time.After(sc.real(sc.Until))
	tick := time.NewTicker(50 * time.Millisecond)
	var runErr error
loop:
	for {
		select {
		case <-ctx.Done():
			runErr = ctx.Err()
			break loop
		case runErr = <-errs:
			break loop
		case <-deadline:
			break loop
		case <-tick.C:
			if sc.HealthyOnly && prov.successes() >= healthy {
				break loop
			}
		}
	}
	tick.Stop()
	stop()
	wg.Wait()
	if runErr != nil {
		return Result{}, runErr
	}

	res := Result{Scenario: sc.Name, Settings: st.Name, Messages: queue.sent, LeasesExpired: store.expired(),
		Tenants: map[string]TenantResult{}, Took: time.Since(began)}
	rows, err := pool.Query(ctx, outcomeSQL)
	if err != nil {
		return res, err
	}
	type counts struct{ rows, attempts, completed, dead int }
	byTenant, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
		name string
		c    counts
	}, error) {
		var x struct {
			name string
			c    counts
		}
		err := r.Scan(&x.name, &x.c.rows, &x.c.attempts, &x.c.completed, &x.c.dead)
		return x, err
	})
	if err != nil {
		return res, err
	}
	var healthyWaits []time.Duration
	for _, x := range byTenant {
		tr := prov.result(x.name, sc)
		tr.Rows, tr.Attempts, tr.Completed, tr.DeadLettered = x.c.rows, x.c.attempts, x.c.completed, x.c.dead
		res.Tenants[x.name] = tr
		res.Rows += x.c.rows
		res.Attempts += x.c.attempts
		res.Completed += x.c.completed
		res.DeadLettered += x.c.dead
	}
	prov.mu.Lock()
	for key, n := range prov.calls {
		res.Calls += n
		if n > 1 {
			res.RowsCalledTwice++
		}
		res.MaxCallsPerRow = max(res.MaxCallsPerRow, n)
		if t, ok := prov.firstOK[key]; ok {
			healthyWaits = append(healthyWaits, sc.sim(t.Sub(prov.queuedAt[tenantOf(key)])))
		}
	}
	prov.mu.Unlock()
	res.WaitP50, res.WaitP95 = percentile(healthyWaits, 50), percentile(healthyWaits, 95)
	return res, nil
}

type tenantIDs struct{ org, conn, po string }

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, (len(s)*p)/100)]
}

// countingStore is the dispatcher's store: it counts expired leases and,
// for today's settings, claims with legacyClaimSQL.
type countingStore struct {
	*outbox.Store
	pool   *pgxpool.Pool
	legacy bool

	mu                    sync.Mutex
	reclaimed, deadLetter int
}

func (s *countingStore) expired() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reclaimed + s.deadLetter
}

func (s *countingStore) Sweep(ctx context.Context, p outbox.ClaimParams) (outbox.Sweep, error) {
	sw, err := s.Store.Sweep(ctx, p)
	s.mu.Lock()
	s.deadLetter += sw.DeadLettered
	s.mu.Unlock()
	return sw, err
}

func (s *countingStore) ClaimBatch(ctx context.Context, p outbox.ClaimParams) (outbox.Batch, error) {
	var (
		b   outbox.Batch
		err error
	)
	if s.legacy {
		b, err = s.legacyClaim(ctx, p)
	} else {
		b, err = s.Store.ClaimBatch(ctx, p)
	}
	n := 0
	for _, c := range b.Claims {
		if c.Reclaimed {
			n++
		}
	}
	s.mu.Lock()
	s.reclaimed += n
	s.mu.Unlock()
	return b, err
}

func (s *countingStore) legacyClaim(ctx context.Context, p outbox.ClaimParams) (outbox.Batch, error) {
	rows, err := s.pool.Query(ctx, legacyClaimSQL, p.Limit, p.MaxAttempts, p.Lease.Seconds(), nil, nil)
	if err != nil {
		return outbox.Batch{}, fmt.Errorf("legacy claim: %w", err)
	}
	claims, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outbox.Claim, error) {
		var c outbox.Claim
		err := r.Scan(&c.ID, &c.OrganizationID, &c.ConnectionID, &c.CommandType, &c.ClaimToken,
			&c.AttemptCount, &c.Reclaimed, &c.CreatedAt)
		return c, err
	})
	return outbox.Batch{Claims: claims}, err
}

// noCredentials: the simulated connections carry no credential reference.
type noCredentials struct{}

func (noCredentials) ResolveConnection(context.Context, credential.Connection) (credential.Credential, error) {
	return credential.Credential{}, errors.New("no credentials in the overload scenarios")
}
func (noCredentials) Invalidate(string) {}

// simQueue is an in-process SQS queue: FIFO, redelivering what a consumer
// reports failed.
type simQueue struct {
	mu    sync.Mutex
	msgs  []simMessage
	wake  chan struct{}
	sent  int
	count int
}

type simMessage struct{ id, body string }

func newSimQueue() *simQueue { return &simQueue{wake: make(chan struct{}, 1)} }

func (q *simQueue) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	out := &sqs.SendMessageBatchOutput{}
	q.mu.Lock()
	for _, e := range in.Entries {
		q.count++
		q.sent++
		q.msgs = append(q.msgs, simMessage{id: "m" + strconv.Itoa(q.count), body: aws.ToString(e.MessageBody)})
		out.Successful = append(out.Successful, sqstypes.SendMessageBatchResultEntry{Id: e.Id})
	}
	q.mu.Unlock()
	q.signal()
	return out, nil
}

func (q *simQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *simQueue) put(m simMessage) {
	q.mu.Lock()
	q.msgs = append(q.msgs, m)
	q.mu.Unlock()
	q.signal()
}

// receive takes up to n messages, waiting up to wait for the first.
func (q *simQueue) receive(ctx context.Context, n int, wait time.Duration) []simMessage {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		q.mu.Lock()
		if len(q.msgs) > 0 {
			k := min(n, len(q.msgs))
			out := slices.Clone(q.msgs[:k])
			q.msgs = q.msgs[k:]
			more := len(q.msgs) > 0
			q.mu.Unlock()
			if more {
				q.signal()
			}
			return out
		}
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-deadline.C:
			return nil
		case <-q.wake:
		}
	}
}

// simProvider is the provider behind every connection: it answers as its
// tenant's Mode says and counts calls per idempotency key and concurrent
// calls per tenant.
type simProvider struct {
	sc     Scenario
	tenant map[string]Tenant // connection id → tenant

	mu            sync.Mutex
	calls         map[string]int
	firstOK       map[string]time.Time
	queuedAt      map[string]time.Time
	inFlight, top map[string]int
	tenantCalls   map[string]int
	oks           int
}

func newSimProvider(sc Scenario) *simProvider {
	return &simProvider{sc: sc, tenant: map[string]Tenant{}, calls: map[string]int{}, firstOK: map[string]time.Time{},
		queuedAt: map[string]time.Time{}, inFlight: map[string]int{}, top: map[string]int{}, tenantCalls: map[string]int{}}
}

func tenantOf(key string) string {
	for i := range key {
		if key[i] == ':' {
			return key[:i]
		}
	}
	return key
}

func (p *simProvider) queued(name string, at time.Time) {
	p.mu.Lock()
	p.queuedAt[name] = at
	p.mu.Unlock()
}

func (p *simProvider) successes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.oks
}

func (p *simProvider) Name() string { return "sim" }

func (p *simProvider) PushPurchaseOrder(ctx context.Context, conn provider.Connection, _ credential.Credential,
	cmd provider.PurchaseOrderPush) (provider.Result, error) {
	t := p.tenant[conn.ID]
	p.mu.Lock()
	p.calls[cmd.IdempotencyKey]++
	p.tenantCalls[t.Name]++
	p.inFlight[t.Name]++
	p.top[t.Name] = max(p.top[t.Name], p.inFlight[t.Name])
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inFlight[t.Name]--
		p.mu.Unlock()
	}()
	if t.Mode == Hanging {
		<-ctx.Done()
		return provider.Result{}, ctx.Err()
	}
	if !sleep(ctx, p.sc.real(p.sc.Latency)) {
		return provider.Result{}, &provider.Error{Kind: provider.Retryable, Message: "provider call timed out", Err: ctx.Err()}
	}
	if t.Mode == Down {
		return provider.Result{}, &provider.Error{Kind: provider.Retryable, StatusCode: 503, Message: "provider answered 503"}
	}
	p.mu.Lock()
	if _, ok := p.firstOK[cmd.IdempotencyKey]; !ok {
		p.firstOK[cmd.IdempotencyKey] = time.Now()
		p.oks++
	}
	p.mu.Unlock()
	return provider.Result{Status: provider.StatusCompleted, ExternalID: "sim-" + cmd.IdempotencyKey}, nil
}

func (p *simProvider) result(name string, sc Scenario) TenantResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	tr := TenantResult{Calls: p.tenantCalls[name], MaxConcurrent: p.top[name]}
	var waits []time.Duration
	for key, at := range p.firstOK {
		if tenantOf(key) == name {
			waits = append(waits, sc.sim(at.Sub(p.queuedAt[name])))
		}
	}
	tr.WaitP50, tr.WaitP95 = percentile(waits, 50), percentile(waits, 95)
	if len(waits) > 0 {
		tr.WaitMax = slices.Max(waits)
	}
	return tr
}
