// Package faulttest injects faults and hostile input into the
// whole pipeline (outbox store, dispatcher, push worker, providers,
// credential resolver) against real PostgreSQL and moto_server, and asserts
// the end state of every row and what the provider received.
//
// Tests that stop a server start their own (a second cluster, a second
// moto_server), so the servers the parallel tests share never go away.
package faulttest

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/logging"
	"integration-outbox/internal/message"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/push"
	"integration-outbox/internal/testenv"
)

var (
	pg   *testenv.Postgres
	moto *testenv.Moto
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.WithPostgres(&pg), testenv.WithMoto(&moto))
}

const queueURL = "https://sqs.us-east-1.amazonaws.com/123456789012/push-purchase-order"

// logBuffer collects output written from several goroutines.
type logBuffer = testenv.Buffer

// queue is an in-process stand-in for an SQS queue: the dispatcher sends to
// it (dispatch.Sender), workers receive batches from it, and a record a
// worker reports as a batch item failure is put back, as SQS makes it
// visible again. It remembers every message ever sent.
type queue struct {
	mu      sync.Mutex
	pending []events.SQSMessage
	sent    []message.Message
	seq     atomic.Int64
}

func (q *queue) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	out := &sqs.SendMessageBatchOutput{}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, e := range in.Entries {
		m, err := message.Decode(aws.ToString(e.MessageBody))
		if err != nil {
			return nil, fmt.Errorf("queue stand-in: dispatcher sent a malformed body: %w", err)
		}
		id := fmt.Sprintf("msg-%d", q.seq.Add(1))
		q.pending = append(q.pending, events.SQSMessage{MessageId: id, Body: aws.ToString(e.MessageBody)})
		q.sent = append(q.sent, m)
		out.Successful = append(out.Successful, sqstypes.SendMessageBatchResultEntry{Id: e.Id, MessageId: aws.String(id)})
	}
	return out, nil
}

// receive takes up to n messages.
func (q *queue) receive(n int) []events.SQSMessage {
	q.mu.Lock()
	defer q.mu.Unlock()
	n = min(n, len(q.pending))
	out := append([]events.SQSMessage(nil), q.pending[:n]...)
	q.pending = q.pending[n:]
	return out
}

// putBack makes the records a worker reported as failures visible again.
func (q *queue) putBack(batch []events.SQSMessage, resp events.SQSEventResponse) {
	failed := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range batch {
		if failed[m.MessageId] {
			q.pending = append(q.pending, m)
		}
	}
}

func (q *queue) messages() []message.Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]message.Message(nil), q.sent...)
}

func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

// counting wraps a provider and counts its calls by idempotency key.
type counting struct {
	provider.PurchaseOrderPusher
	mu    sync.Mutex
	calls map[string]int
	total atomic.Int64
}

func newCounting(p provider.PurchaseOrderPusher) *counting {
	return &counting{PurchaseOrderPusher: p, calls: map[string]int{}}
}

func (c *counting) PushPurchaseOrder(ctx context.Context, conn provider.Connection, cred credential.Credential, cmd provider.PurchaseOrderPush) (provider.Result, error) {
	c.mu.Lock()
	c.calls[cmd.IdempotencyKey]++
	c.mu.Unlock()
	c.total.Add(1)
	return c.PurchaseOrderPusher.PushPurchaseOrder(ctx, conn, cred, cmd)
}

func (c *counting) callsFor(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[key]
}

// env is one test's pipeline: a fresh database, a queue stand-in, the
// shipped providers (the sandbox wrapped in a call counter) and a log buffer
// every component writes JSON to.
type env struct {
	f       *testenv.Fixture
	db      outbox.DB
	store   *outbox.Store
	q       *queue
	logs    *logBuffer
	log     *slog.Logger
	sandbox *counting
	webhook *provider.Webhook
	creds   push.Credentials
	// queueURL is where the dispatcher routes push_purchase_order.
	queueURL string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, pg.NewDB(t), nil)
}

// newEnvOn builds an env on f, running the pipeline's statements on db (f's
// pool when nil).
func newEnvOn(t *testing.T, f *testenv.Fixture, db outbox.DB) *env {
	t.Helper()
	if db == nil {
		db = f.Pool
	}
	logs := &logBuffer{}
	log := logging.New(logs, slog.LevelDebug)
	wh := provider.NewWebhook(provider.WebhookConfig{AllowPrivateNetworks: true, Timeout: 5 * time.Second})
	t.Cleanup(wh.CloseIdleConnections)
	resolver, err := credential.NewResolver(secretsmanager.NewFromConfig(moto.AWSConfig()),
		credential.ResolverConfig{Prefix: "integrations/", Region: "us-east-1", TTL: time.Minute, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return &env{f: f, db: db, store: outbox.NewStore(db), q: &queue{}, logs: logs, log: log,
		sandbox: newCounting(provider.NewSandbox(provider.SandboxConfig{})), webhook: wh, creds: resolver,
		queueURL: queueURL}
}

// workerOpts tunes a worker; zero fields keep the env's defaults.
type workerOpts struct {
	store         push.Store
	creds         push.Credentials
	providers     provider.Registry
	timeout       time.Duration
	recordReserve time.Duration
	maxAttempts   int
}

func (e *env) worker(t *testing.T, o workerOpts) *push.Worker {
	t.Helper()
	if o.store == nil {
		o.store = e.store
	}
	if o.creds == nil {
		o.creds = e.creds
	}
	if o.providers == nil {
		o.providers = provider.Registry{provider.NameWebhook: e.webhook, provider.NameSandbox: e.sandbox}
	}
	w, err := push.New(o.store, o.creds, purchaseorder.NewCommand(e.db), push.Config{
		Providers: o.providers, MaxAttempts: cmp.Or(o.maxAttempts, 10), ProviderTimeout: cmp.Or(o.timeout, 5*time.Second),
		RecordReserve: o.recordReserve, Logger: e.log, Jitter: func() float64 { return 0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func (e *env) dispatcher(t *testing.T, sender dispatch.Sender, lease time.Duration, batch int) *dispatch.Dispatcher {
	t.Helper()
	if sender == nil {
		sender = e.q
	}
	d, err := dispatch.New(outbox.NewStore(e.db), sender, dispatch.Config{
		Routes: dispatch.Routes{purchaseorder.CommandType: e.queueURL}, BatchSize: batch, MaxPerRun: 5000,
		MaxAttempts: 10, Lease: lease, Logger: e.log,
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// dispatch runs one dispatch invocation into the env's queue and fails the
// test on error.
func (e *env) dispatch(t *testing.T, lease time.Duration) dispatch.Summary {
	t.Helper()
	s, err := e.dispatcher(t, nil, lease, 50).Run(context.Background(), dispatch.Request{})
	if err != nil {
		t.Fatalf("dispatch: %v", err)
	}
	return s
}

// handle delivers batch to w under a Lambda-like deadline and puts the
// records it reports as failures back on the queue.
func (e *env) handle(t *testing.T, w *push.Worker, batch []events.SQSMessage) events.SQSEventResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := w.Handle(ctx, events.SQSEvent{Records: batch})
	if err != nil {
		t.Fatalf("push handler returned a function error: %v", err)
	}
	if resp.BatchItemFailures == nil {
		t.Fatal("batchItemFailures must always be present")
	}
	e.q.putBack(batch, resp)
	return resp
}

// drain hands every queued message to w, ten at a time.
func (e *env) drain(t *testing.T, w *push.Worker) {
	t.Helper()
	for {
		batch := e.q.receive(10)
		if len(batch) == 0 {
			return
		}
		if resp := e.handle(t, w, batch); len(resp.BatchItemFailures) > 0 {
			t.Fatalf("batch item failures with everything up: %v\nlogs:\n%s", resp.BatchItemFailures, tail(e.logs.String(), 4000))
		}
	}
}

// row is the full state of one outbox row.
type row struct {
	ID, Org, Status, Key string
	Attempts             int
	LastError            string
	ProviderStatus       string
	ProviderReference    string
	Leased, Started      bool
	Due                  bool // failed with next_attempt_at <= now()
	NextIn               *float64
	Conflicts            int // open conflicts
	ConflictType         string
}

// rows reads every outbox row of the database, keyed by id.
func rows(t *testing.T, db outbox.DB) map[string]row {
	t.Helper()
	rs, err := db.Query(context.Background(), `
		with c as (
			select outbox_id, count(*) filter (where status = 'open') as open, min(conflict_type) as conflict_type
			from external_integration_conflicts group by outbox_id
		)
		select o.id::text, o.organization_id::text, o.status, coalesce(o.idempotency_key, ''), o.attempt_count,
			coalesce(o.last_error, ''), coalesce(o.provider_status, ''), coalesce(o.provider_reference, ''),
			o.lease_expires_at is not null,
			-- Started: in flight (its claim's start) or recorded.
			o.started_at is not null or exists (select 1 from integration_outbox_starts s
				where s.claim_token = o.claim_token and s.started_at is not null),
			coalesce(o.next_attempt_at <= now(), false), extract(epoch from o.next_attempt_at - now())::float8,
			coalesce(c.open, 0), coalesce(c.conflict_type, '')
		from external_integration_outbox o left join c on c.outbox_id = o.id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	out := map[string]row{}
	for rs.Next() {
		var r row
		if err := rs.Scan(&r.ID, &r.Org, &r.Status, &r.Key, &r.Attempts, &r.LastError, &r.ProviderStatus,
			&r.ProviderReference, &r.Leased, &r.Started, &r.Due, &r.NextIn, &r.Conflicts, &r.ConflictType); err != nil {
			t.Fatal(err)
		}
		out[r.ID] = r
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkEveryRow asserts what must hold for every row once a test has
// settled: a known status; nothing processing without a lease or a provider
// status; a failed row scheduled; a dead_letter row with exactly one open
// conflict and no other row with one; last_error within 1000 characters of
// valid UTF-8.
func checkEveryRow(t *testing.T, db outbox.DB) map[string]row {
	t.Helper()
	all := rows(t, db)
	for _, r := range all {
		switch outbox.Status(r.Status) {
		case outbox.StatusQueued, outbox.StatusCompleted, outbox.StatusUncertain, outbox.StatusUnsupported:
		case outbox.StatusProcessing:
			if !r.Leased && r.ProviderStatus == "" {
				t.Errorf("row %s is processing with neither a lease nor a provider status: stuck forever", r.ID)
			}
		case outbox.StatusFailed:
			if r.NextIn == nil {
				t.Errorf("failed row %s has no next_attempt_at", r.ID)
			}
		case outbox.StatusDeadLetter:
			if r.Conflicts != 1 {
				t.Errorf("dead_letter row %s has %d open conflicts, want 1", r.ID, r.Conflicts)
			}
		default:
			t.Errorf("row %s has unknown status %q", r.ID, r.Status)
		}
		if outbox.Status(r.Status) != outbox.StatusDeadLetter && r.Conflicts != 0 {
			t.Errorf("%s row %s has %d open conflicts", r.Status, r.ID, r.Conflicts)
		}
		checkStoredText(t, "last_error of "+r.ID, r.LastError)
	}
	return all
}

// checkStoredText asserts a stored error text is at most 1000 characters of
// valid UTF-8 without NUL.
func checkStoredText(t *testing.T, what, s string) {
	t.Helper()
	if n := len([]rune(s)); n > push.MaxLastError {
		t.Errorf("%s is %d characters long", what, n)
	}
	if strings.ContainsRune(s, 0) || !utf8.ValidString(s) {
		t.Errorf("%s is not valid UTF-8 text: %q", what, s)
	}
}

// waitLeaseExpired waits until no row of ids holds an unexpired lease.
func waitLeaseExpired(t *testing.T, db outbox.DB, ids []string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := db.QueryRow(context.Background(), `select count(*) from external_integration_outbox
			where id = any($1::uuid[]) and lease_expires_at >= now()`, ids).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d leases still unexpired after 30s", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// mustNotContain fails when any of secrets occurs in text.
func mustNotContain(t *testing.T, where, text string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(text, s) {
			t.Errorf("%s contains the secret value %q", where, s)
		}
	}
}
