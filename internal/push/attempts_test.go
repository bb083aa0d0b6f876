package push_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/push"
	"integration-outbox/internal/sqlroutine"
	"integration-outbox/internal/testenv"
)

// attemptRow is one row of external_integration_attempts.
type attemptRow struct {
	Attempt           int
	Outcome           string
	ProviderCalled    bool
	HTTPStatus        *int
	ErrorExcerpt      *string
	ProviderReference *string
	StartedAt         *time.Time
	FinishedAt        *time.Time
	OrganizationID    string
}

func attempts(t *testing.T, f *testenv.Fixture, id string) []attemptRow {
	t.Helper()
	rows, err := f.Pool.Query(context.Background(), `
		select attempt, outcome, provider_called, http_status, error_excerpt, provider_reference,
			started_at, finished_at, organization_id::text
		from external_integration_attempts where outbox_id = $1 order by attempt`, id)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (attemptRow, error) {
		var a attemptRow
		err := r.Scan(&a.Attempt, &a.Outcome, &a.ProviderCalled, &a.HTTPStatus, &a.ErrorExcerpt, &a.ProviderReference,
			&a.StartedAt, &a.FinishedAt, &a.OrganizationID)
		return a, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestAttemptHistoryKeepsOneRowPerProviderCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, func(n int, _ *http.Request) (int, map[string]string, string) {
		if n == 1 {
			return 503, nil, "busy, token=tok-abc"
		}
		return 200, nil, `{"id":"EXT-2"}`
	})
	ref := secret(t, `{"token":"tok-abc"}`, b.org)
	id := b.webhookCommand(t, rc.URL, ref)
	b.handle(t, b.claim(t, 10))
	if _, err := b.f.Pool.Exec(context.Background(),
		`update external_integration_outbox set next_attempt_at = now() where id = $1`, id); err != nil {
		t.Fatal(err)
	}
	b.handle(t, b.claim(t, 10))

	got := attempts(t, b.f, id)
	if len(got) != 2 {
		t.Fatalf("%d attempt rows, want 2: %+v", len(got), got)
	}
	first, second := got[0], got[1]
	if first.Attempt != 1 || first.Outcome != "failed" || !first.ProviderCalled || first.HTTPStatus == nil ||
		*first.HTTPStatus != 503 || first.ErrorExcerpt == nil || !strings.Contains(*first.ErrorExcerpt, "503") ||
		first.OrganizationID != b.org {
		t.Errorf("first attempt %+v, want failed with HTTP 503 and its error", first)
	}
	if first.ErrorExcerpt != nil && strings.Contains(*first.ErrorExcerpt, "tok-abc") {
		t.Errorf("the error excerpt shows the credential: %q", *first.ErrorExcerpt)
	}
	if second.Attempt != 2 || second.Outcome != "completed" || second.HTTPStatus == nil || *second.HTTPStatus != 200 ||
		second.ProviderReference == nil || *second.ProviderReference != "EXT-2" || second.ErrorExcerpt != nil {
		t.Errorf("second attempt %+v, want completed with HTTP 200 and reference EXT-2", second)
	}
	for _, a := range got {
		if a.StartedAt == nil || a.FinishedAt == nil || a.FinishedAt.Before(*a.StartedAt) {
			t.Errorf("attempt %d: started %v finished %v", a.Attempt, a.StartedAt, a.FinishedAt)
		}
	}
}

// An attempt that ends before any provider call (here: the order does not
// exist) still leaves its row, marked as no call and without an HTTP status.
func TestAttemptWithoutAProviderCallIsRecordedAsSuch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, answer(200, nil, `{}`))
	conn := b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: b.org, Provider: "webhook", Config: map[string]string{"url": rc.URL}})
	id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: conn, Provider: "webhook", EntityID: b.f.NewID(t)})
	b.handle(t, b.claim(t, 10))
	got := attempts(t, b.f, id)
	if len(got) != 1 || got[0].Outcome != "dead_letter" || got[0].ProviderCalled || got[0].HTTPStatus != nil ||
		got[0].ErrorExcerpt == nil || got[0].StartedAt == nil || got[0].FinishedAt == nil {
		t.Fatalf("attempts %+v, want one dead_letter attempt without a call", got)
	}
	if rc.Calls() != 0 {
		t.Errorf("provider called %d times", rc.Calls())
	}
}

// statementCounter counts the statements a pool sends.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if data.SQL != sqlroutine.ReadSQL { // which routines the database has: once a container
		c.n.Add(1)
	}
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A batch of 10 jobs is one start, one load of the command's entities and
// one record statement, 0.3 statements per job: the attempt history and the
// circuit breaker cost no statement of their own.
func TestBatchOfTenJobsTakesThreeStatements(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, answer(200, nil, `{"id":"EXT"}`))
	var ids []string
	for range 10 {
		ids = append(ids, b.webhookCommand(t, rc.URL, ""))
	}
	ev := b.claim(t, 10)

	cfg, err := pgxpool.ParseConfig(b.f.URL)
	if err != nil {
		t.Fatal(err)
	}
	counter := &statementCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	resolver, err := credential.NewResolver(b.secrets, credential.ResolverConfig{Prefix: "integrations/", Region: "us-east-1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// As a container at its start (internal/app): the batch then costs
	// three statements.
	store := outbox.NewStore(pool)
	if err := store.ReadTextLengths(context.Background()); err != nil {
		t.Fatal(err)
	}
	counter.n.Store(0)
	w, err := push.New(store, resolver, purchaseorder.NewCommand(pool), push.Config{
		Providers: provider.NewRegistry(provider.NewWebhook(provider.WebhookConfig{AllowPrivateNetworks: true, Timeout: 2 * time.Second}),
			provider.NewSandbox(provider.SandboxConfig{})),
		MaxAttempts: 10, Jitter: func() float64 { return 0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Handle(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	if n := counter.n.Load(); n != 3 {
		t.Errorf("%d statements for a batch of 10 jobs, want 3 (start + load + record)", n)
	}
	if n := b.f.Count(t, `select count(*) from external_integration_attempts where outbox_id = any($1)
		and outcome = 'completed' and http_status = 200`, ids); n != 10 {
		t.Errorf("%d attempt rows, want 10", n)
	}
}
