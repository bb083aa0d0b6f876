package push_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/message"
	"integration-outbox/internal/metrics"
	"integration-outbox/internal/metrics/metricstest"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/pace"
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

// newReceiver starts a webhook receiver that records what it got and
// answers the n-th request with answer(n, r).
func newReceiver(t *testing.T, answer func(n int, r *http.Request) (int, map[string]string, string)) *testenv.Receiver {
	t.Helper()
	return testenv.NewReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) {
		status, header, body := answer(n, r)
		testenv.ReplyWithHeader(status, header, body)(n, w, r)
	})
}

func answer(status int, header map[string]string, body string) func(int, *http.Request) (int, map[string]string, string) {
	return func(int, *http.Request) (int, map[string]string, string) { return status, header, body }
}

// countingSecrets counts the Secrets Manager calls that reach moto.
type countingSecrets struct {
	api            credential.SecretsAPI
	describe, gets atomic.Int64
}

func (c *countingSecrets) GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, o ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	c.gets.Add(1)
	return c.api.GetSecretValue(ctx, in, o...)
}

func (c *countingSecrets) DescribeSecret(ctx context.Context, in *secretsmanager.DescribeSecretInput, o ...func(*secretsmanager.Options)) (*secretsmanager.DescribeSecretOutput, error) {
	c.describe.Add(1)
	return c.api.DescribeSecret(ctx, in, o...)
}

type bundle struct {
	f       *testenv.Fixture
	store   *outbox.Store
	worker  *push.Worker
	secrets *countingSecrets
	org     string
}

type options struct {
	maxAttempts int
	timeout     time.Duration
	metrics     io.Writer
	logs        io.Writer // the worker's JSON logs; discarded when nil
	paced       bool      // the worker paces limited providers' calls (pace.Pacer)
}

func setup(t *testing.T, opts ...func(*options)) bundle {
	t.Helper()
	o := options{maxAttempts: 10, timeout: 2 * time.Second}
	for _, fn := range opts {
		fn(&o)
	}
	f := pg.NewDB(t)
	secrets := &countingSecrets{api: secretsmanager.NewFromConfig(moto.AWSConfig())}
	resolver, err := credential.NewResolver(secrets, credential.ResolverConfig{Prefix: "integrations/", Region: "us-east-1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	store := outbox.NewStore(f.Pool)
	logger := slog.New(slog.DiscardHandler)
	if o.logs != nil {
		logger = slog.New(slog.NewJSONHandler(o.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	w, err := push.New(store, resolver, purchaseorder.NewCommand(f.Pool), push.Config{
		Logger: logger,
		Providers: provider.NewRegistry(
			provider.NewWebhook(provider.WebhookConfig{AllowPrivateNetworks: true, Timeout: o.timeout}),
			provider.NewXero(provider.AccountingConfig{AllowPrivateNetworks: true, Timeout: o.timeout}),
			provider.NewQuickBooks(provider.AccountingConfig{AllowPrivateNetworks: true, Timeout: o.timeout}),
			provider.NewSandbox(provider.SandboxConfig{})),
		MaxAttempts: o.maxAttempts, ProviderTimeout: o.timeout,
		Jitter:  func() float64 { return 0 },
		Metrics: metricsTo(o.metrics),
		Pacer: func() push.Pacer {
			if o.paced {
				return pace.NewPacer(f.Pool)
			}
			return nil
		}(), PaceMaxWait: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return bundle{f: f, store: store, worker: w, secrets: secrets, org: f.NewID(t)}
}

// secret creates a Secrets Manager secret under the prefix and returns its name.
func secret(t *testing.T, value string, orgTag string) string {
	t.Helper()
	name, _ := testenv.CreateSecret(t, secretsmanager.NewFromConfig(moto.AWSConfig()), testenv.SecretName(t, ""), value, orgTag)
	return name
}

// webhookCommand inserts a connection to url, an order and its command.
func (b bundle) webhookCommand(t *testing.T, url, credRef string) string {
	t.Helper()
	return b.f.PurchaseOrderCommand(t, testenv.PurchaseOrderCommandOpts{Lines: 2,
		Connection: testenv.ConnectionOpts{OrganizationID: b.org, Provider: "webhook",
			CredentialReference: credRef, Config: map[string]string{"url": url}}}).CommandID
}

// claim claims due rows as the dispatcher does and returns the SQS event the
// push function would receive.
func (b bundle) claim(t *testing.T, limit int) events.SQSEvent {
	t.Helper()
	claims, err := b.store.Claim(context.Background(), outbox.ClaimParams{Limit: limit, MaxAttempts: 10, Lease: 15 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var ev events.SQSEvent
	for i, c := range claims {
		body, err := message.Message{OutboxID: c.ID, OrganizationID: c.OrganizationID, ConnectionID: c.ConnectionID,
			CommandType: c.CommandType, ClaimToken: c.ClaimToken}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: fmt.Sprintf("m%d", i), Body: body})
	}
	return ev
}

func (b bundle) handle(t *testing.T, ev events.SQSEvent) events.SQSEventResponse {
	t.Helper()
	resp, err := b.worker.Handle(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if resp.BatchItemFailures == nil {
		t.Fatal("batchItemFailures must always be present")
	}
	return resp
}

func TestWebhookResponseClassesEndInTheirStates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		status      int
		header      map[string]string
		body        string
		wantStatus  string
		wantRef     string
		wantProv    string
		wantErr     string  // substring of last_error
		wantRetry   float64 // seconds until next_attempt_at (failed only)
		wantConfict string
	}{
		{name: "200 with id", status: 200, body: `{"id":"EXT-200"}`, wantStatus: "completed", wantRef: "EXT-200", wantProv: "completed"},
		{name: "201 with id", status: 201, body: `{"id":"EXT-201"}`, wantStatus: "completed", wantRef: "EXT-201", wantProv: "completed"},
		{name: "202 accepted", status: 202, body: `{"id":"EXT-202"}`, wantStatus: "processing", wantRef: "EXT-202", wantProv: "accepted", wantRetry: 3600},
		{name: "409 already done", status: 409, body: `{"id":"EXT-409"}`, wantStatus: "completed", wantRef: "EXT-409", wantProv: "completed"},
		{name: "400 rejected", status: 400, body: `{"error":"bad supplier"}`, wantStatus: "dead_letter", wantErr: "400", wantConfict: "provider_rejected"},
		{name: "422 rejected", status: 422, body: `unprocessable`, wantStatus: "dead_letter", wantErr: "422", wantConfict: "provider_rejected"},
		{name: "429 with Retry-After", status: 429, header: map[string]string{"Retry-After": "120"}, wantStatus: "failed", wantErr: "429", wantRetry: 120},
		{name: "500", status: 500, body: "oops", wantStatus: "failed", wantErr: "500", wantRetry: 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			rc := newReceiver(t, answer(tc.status, tc.header, tc.body))
			id := b.webhookCommand(t, rc.URL, "")
			resp := b.handle(t, b.claim(t, 10))
			if len(resp.BatchItemFailures) != 0 {
				t.Fatalf("batch item failures: %v", resp.BatchItemFailures)
			}
			r := b.f.Row(t, id)
			if r.Status != tc.wantStatus || r.AttemptCount != 1 {
				t.Fatalf("row = %s attempt %d, want %s attempt 1 (last_error %v)", r.Status, r.AttemptCount, tc.wantStatus, deref(r.LastError))
			}
			if deref(r.ProviderReference) != tc.wantRef || deref(r.ProviderStatus) != tc.wantProv {
				t.Errorf("provider_reference %q provider_status %q, want %q %q", deref(r.ProviderReference), deref(r.ProviderStatus), tc.wantRef, tc.wantProv)
			}
			if tc.wantErr != "" && !strings.Contains(deref(r.LastError), tc.wantErr) {
				t.Errorf("last_error %q lacks %q", deref(r.LastError), tc.wantErr)
			}
			if tc.wantStatus == "completed" && r.CompletedAt == nil {
				t.Error("completed_at not set")
			}
			if tc.wantStatus == "processing" && (r.LeaseExpiresAt != nil) {
				t.Error("an accepted row must have no lease to expire")
			}
			if tc.wantRetry > 0 {
				if r.RetryInSeconds == nil || *r.RetryInSeconds < tc.wantRetry-5 || *r.RetryInSeconds > tc.wantRetry+1 {
					t.Errorf("next_attempt_at in %v s, want ≈%v", r.RetryInSeconds, tc.wantRetry)
				}
			} else if r.NextAttemptAt != nil {
				t.Errorf("next_attempt_at set for %s", r.Status)
			}
			conflicts := b.f.Count(t, `select count(*) from external_integration_conflicts where outbox_id = $1 and conflict_type = $2 and status = 'open' and severity = 'high'`, id, tc.wantConfict)
			if (tc.wantConfict != "") != (conflicts == 1) {
				t.Errorf("conflicts of type %q: %d", tc.wantConfict, conflicts)
			}
			if rc.Calls() != 1 {
				t.Errorf("provider called %d times, want 1", rc.Calls())
			}
		})
	}
}

func TestProviderTimeoutIsRetryable(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *options) { o.timeout = 300 * time.Millisecond })
	rc := newReceiver(t, func(int, *http.Request) (int, map[string]string, string) {
		time.Sleep(2 * time.Second)
		return 200, nil, `{"id":"late"}`
	})
	id := b.webhookCommand(t, rc.URL, "")
	b.handle(t, b.claim(t, 10))
	r := b.f.Row(t, id)
	if r.Status != "failed" || r.RetryInSeconds == nil || *r.RetryInSeconds < 25 || *r.RetryInSeconds > 31 || r.LastError == nil {
		t.Fatalf("timed out row = %+v (last_error %q)", r, deref(r.LastError))
	}
}

func TestWebhookRequestFollowsTheProtocol(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, answer(200, nil, `{"id":"X"}`))
	ref := secret(t, `{"token":"tok-abc","signingSecret":"sign-xyz"}`, b.org)
	id := b.webhookCommand(t, rc.URL, ref)
	b.handle(t, b.claim(t, 10))
	if r := b.f.Row(t, id); r.Status != "completed" {
		t.Fatalf("row %s, last_error %q", r.Status, deref(r.LastError))
	}
	got := rc.Requests()[0]
	if got.Header.Get("Authorization") != "Bearer tok-abc" || got.Header.Get("Content-Type") != "application/json" ||
		!strings.HasPrefix(got.Header.Get("Idempotency-Key"), "idem-") || !strings.Contains(got.Header.Get("X-Outbox-Signature"), ",v1=") {
		t.Errorf("headers: %v", got.Header)
	}
	po, _ := got.Body["purchaseOrder"].(map[string]any)
	if got.Body["commandType"] != "push_purchase_order" || got.Body["externalSupplierId"] != "SUP-1" ||
		po["organizationId"] != b.org || len(po["items"].([]any)) != 2 {
		t.Errorf("body: %v", got.Body)
	}
}

func TestTenthFailureDeadLettersWithExactlyOneConflict(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, answer(503, nil, "down"))
	id := b.webhookCommand(t, rc.URL, "")
	ctx := context.Background()
	for attempt := 1; attempt <= 10; attempt++ {
		b.f.Pool.Exec(ctx, `update external_integration_outbox set next_attempt_at = now() - interval '1 second' where id = $1 and status = 'failed'`, id)
		ev := b.claim(t, 10)
		if len(ev.Records) != 1 {
			t.Fatalf("attempt %d: claimed %d rows", attempt, len(ev.Records))
		}
		b.handle(t, ev)
		r := b.f.Row(t, id)
		if r.AttemptCount != attempt {
			t.Fatalf("attempt_count %d, want %d", r.AttemptCount, attempt)
		}
		if attempt < 10 {
			want := min(3600, 30<<(attempt-1))
			if r.Status != "failed" || r.RetryInSeconds == nil || *r.RetryInSeconds < float64(want)-5 || *r.RetryInSeconds > float64(want)+1 {
				t.Fatalf("attempt %d: %s, retry in %v, want failed in %d s", attempt, r.Status, r.RetryInSeconds, want)
			}
		} else if r.Status != "dead_letter" || r.NextAttemptAt != nil {
			t.Fatalf("10th failure: %s", r.Status)
		}
	}
	if n := b.f.Count(t, `select count(*) from external_integration_conflicts where outbox_id = $1 and conflict_type = 'provider_rejected'`, id); n != 1 {
		t.Errorf("%d conflicts, want exactly 1", n)
	}
	if len(b.claim(t, 10).Records) != 0 {
		t.Error("a dead-lettered row was claimed again")
	}
	if rc.Calls() != 10 {
		t.Errorf("provider called %d times, want 10", rc.Calls())
	}
}

func TestOrderOfAnotherOrganizationOrLocationIsNeverSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, answer(200, nil, `{}`))
	other := b.f.NewID(t)
	foreignPO := b.f.PurchaseOrder(t, other, "", 1)
	loc, otherLoc := b.f.NewID(t), b.f.NewID(t)
	conn := b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: b.org, Provider: "webhook", Config: map[string]string{"url": rc.URL}})
	locConn := b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: b.org, LocationID: loc, Provider: "webhook", Config: map[string]string{"url": rc.URL}})
	otherLocPO := b.f.PurchaseOrder(t, b.org, otherLoc, 1)
	ids := []string{
		b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: conn, Provider: "webhook", EntityID: foreignPO}),
		b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: locConn, Provider: "webhook", EntityID: otherLocPO}),
	}
	b.handle(t, b.claim(t, 10))
	for _, id := range ids {
		r := b.f.Row(t, id)
		if r.Status != "dead_letter" {
			t.Errorf("row %s: %s", id, r.Status)
		}
		if n := b.f.Count(t, `select count(*) from external_integration_conflicts where outbox_id = $1 and conflict_type = 'entity_not_found'`, id); n != 1 {
			t.Errorf("row %s: %d entity_not_found conflicts", id, n)
		}
	}
	if rc.Calls() != 0 {
		t.Errorf("provider received %d requests for orders outside the tenant/location", rc.Calls())
	}
}

func TestDuplicateDeliveriesCallTheProviderOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, answer(200, nil, `{"id":"once"}`))
	id := b.webhookCommand(t, rc.URL, "")
	ev := b.claim(t, 10)
	twice := events.SQSEvent{Records: append(ev.Records, ev.Records...)}
	var wg sync.WaitGroup
	for range 3 { // the same message twice in a batch, three batches at once
		wg.Go(func() { b.handle(t, twice) })
	}
	wg.Wait()
	b.handle(t, ev) // and again after completion
	if rc.Calls() != 1 {
		t.Errorf("provider called %d times, want 1", rc.Calls())
	}
	if r := b.f.Row(t, id); r.Status != "completed" {
		t.Errorf("row %s", r.Status)
	}
}

// A delivered command writes three versions of its outbox row: the host's
// insert, the claim and the record. Starting it writes none, duplicate
// deliveries included: the start is a row of integration_outbox_starts,
// which the record deletes. A trigger of this test's database counts every
// version written.
func TestADeliveredCommandWritesThreeVersionsOfItsRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.f.Pool.Exec(ctx, `
		create table row_versions (id uuid, op text);
		create function count_row_version() returns trigger language plpgsql as $$
		begin insert into row_versions values (new.id, tg_op); return new; end $$;
		create trigger count_row_version after insert or update on external_integration_outbox
			for each row execute function count_row_version()`); err != nil {
		t.Fatal(err)
	}
	rc := newReceiver(t, answer(200, nil, `{"id":"once"}`))
	id := b.webhookCommand(t, rc.URL, "")
	ev := b.claim(t, 10)
	twice := events.SQSEvent{Records: append(ev.Records, ev.Records...)}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { b.handle(t, twice) })
	}
	wg.Wait()
	b.handle(t, ev) // a late duplicate
	if r := b.f.Row(t, id); r.Status != "completed" || r.StartedAt == nil || rc.Calls() != 1 {
		t.Fatalf("row %s started %v after %d calls; want completed, started, one call", r.Status, r.StartedAt, rc.Calls())
	}
	if n := b.f.Count(t, `select count(*) from row_versions where id = $1`, id); n != 3 {
		t.Errorf("%d versions of the row written, want 3 (insert, claim, record)", n)
	}
	if n := b.f.Count(t, `select count(*) from integration_outbox_starts`); n != 0 {
		t.Errorf("%d starts left after the record, want 0", n)
	}
}

func TestCredentialOutsidePrefixOrOfAnotherTenantIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, answer(200, nil, `{}`))
	foreign := secret(t, `{"token":"other-tenant-token"}`, b.f.NewID(t))
	outside := "billing/" + strings.TrimPrefix(secret(t, `{"token":"t"}`, ""), "integrations/")
	notJSON := secret(t, `token=plain-secret-text`, b.org)
	ids := map[string]string{
		b.webhookCommand(t, rc.URL, foreign): "tagged for another organization",
		b.webhookCommand(t, rc.URL, outside): "outside prefix",
		b.webhookCommand(t, rc.URL, notJSON): "not JSON",
	}
	b.handle(t, b.claim(t, 10))
	for id, why := range ids {
		r := b.f.Row(t, id)
		if r.Status != "dead_letter" {
			t.Errorf("%s: row %s", why, r.Status)
		}
		if strings.Contains(deref(r.LastError), "other-tenant-token") || strings.Contains(deref(r.LastError), "plain-secret-text") {
			t.Errorf("%s: secret value in last_error %q", why, deref(r.LastError))
		}
		if n := b.f.Count(t, `select count(*) from external_integration_conflicts where outbox_id = $1 and conflict_type = 'credential_rejected'`, id); n != 1 {
			t.Errorf("%s: %d credential_rejected conflicts", why, n)
		}
	}
	if rc.Calls() != 0 {
		t.Errorf("provider called %d times with refused credentials", rc.Calls())
	}
}

func TestSecretCacheMakesOneLookupForManyJobsOnOneConnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, answer(200, nil, `{}`))
	ref := secret(t, `{"token":"tok"}`, b.org)
	conn := b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: b.org, Provider: "webhook", CredentialReference: ref,
		Config: map[string]string{"url": rc.URL}})
	po := b.f.PurchaseOrder(t, b.org, "", 1)
	for range 100 {
		b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: conn, Provider: "webhook", EntityID: po})
	}
	for {
		ev := b.claim(t, 10)
		if len(ev.Records) == 0 {
			break
		}
		b.handle(t, ev)
	}
	if got := b.f.Count(t, `select count(*) from external_integration_outbox where status = 'completed'`); got != 100 {
		t.Fatalf("%d of 100 completed", got)
	}
	if b.secrets.describe.Load() != 1 || b.secrets.gets.Load() != 1 {
		t.Errorf("Secrets Manager calls for 100 jobs: %d DescribeSecret + %d GetSecretValue, want 1 + 1",
			b.secrets.describe.Load(), b.secrets.gets.Load())
	}
}

// The host application inserts rows with only its own columns (none of ours).
func TestRowWithOnlyTheHostsColumnsIsProcessed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	conn := b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: b.org})
	po := b.f.PurchaseOrder(t, b.org, "", 1)
	var id string
	err := b.f.Pool.QueryRow(context.Background(), `
		insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
			local_entity_type, local_entity_id, payload_json, idempotency_key)
		values ($1, $2, 'sandbox', 'push_purchase_order', 'purchase_order', $3, '{"externalSupplierId":"S"}', 'k-1')
		returning id::text`, b.org, conn, po).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	b.handle(t, b.claim(t, 10))
	if r := b.f.Row(t, id); r.Status != "completed" || r.AttemptCount != 1 || r.ProviderReference == nil {
		t.Errorf("seed-shaped row = %+v", r)
	}
}

func TestBadInputEndsInItsConflictWithoutACall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, answer(200, nil, `{}`))
	conn := b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: b.org, Provider: "webhook", Config: map[string]string{"url": rc.URL}})
	badConfig := b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: b.org, Provider: "webhook", Config: map[string]string{"uri": rc.URL}})
	// A purchase order per command: per-entity order holds none back.
	cases := map[string]string{
		b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: conn, Provider: "webhook", EntityID: b.f.PurchaseOrder(t, b.org, "", 1),
			Payload: map[string]any{"externalsupplierid": "S"}}): "payload_invalid",
		b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: conn, Provider: "webhook", EntityID: b.f.PurchaseOrder(t, b.org, "", 1),
			Payload: map[string]any{"externalSupplierId": 42}}): "payload_invalid",
		b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: badConfig, Provider: "webhook", EntityID: b.f.PurchaseOrder(t, b.org, "", 1)}):    "configuration_invalid",
		b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.f.NewID(t), Provider: "webhook", EntityID: b.f.PurchaseOrder(t, b.org, "", 1)}): "configuration_invalid",
	}
	b.handle(t, b.claim(t, 10))
	for id, want := range cases {
		if r := b.f.Row(t, id); r.Status != "dead_letter" {
			t.Errorf("%s: %s (%s)", want, r.Status, deref(r.LastError))
		}
		if n := b.f.Count(t, `select count(*) from external_integration_conflicts where outbox_id = $1 and conflict_type = $2`, id, want); n != 1 {
			t.Errorf("row %s: %d %s conflicts", id, n, want)
		}
	}
	if rc.Calls() != 0 {
		t.Errorf("provider called %d times", rc.Calls())
	}
}

func TestUnsupportedProviderOrCommand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	conn := b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: b.org, Provider: "carrier-pigeon"})
	po := b.f.PurchaseOrder(t, b.org, "", 1)
	id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: conn, EntityID: po})
	b.handle(t, b.claim(t, 10))
	if r := b.f.Row(t, id); r.Status != "unsupported" || r.CompletedAt == nil {
		t.Errorf("row %+v", r)
	}
}

func TestMalformedBodiesAreAcknowledgedAndDatabaseOutageIsReported(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: b.org}),
		EntityID: b.f.PurchaseOrder(t, b.org, "", 1)})
	ev := b.claim(t, 10)
	ev.Records = append(ev.Records,
		events.SQSMessage{MessageId: "junk-1", Body: "not json"},
		events.SQSMessage{MessageId: "junk-2", Body: `{"outboxId":"'; drop table external_integration_outbox; --"}`})
	if resp := b.handle(t, ev); len(resp.BatchItemFailures) != 0 {
		t.Errorf("failures for junk: %v", resp.BatchItemFailures)
	}
	if r := b.f.Row(t, id); r.Status != "completed" {
		t.Errorf("row %s", r.Status)
	}
	// Database unreachable: every well-formed record is a batch item failure.
	b.f.Pool.Close()
	resp := b.handle(t, ev)
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "m0" {
		t.Errorf("with the database down, failures = %v, want [m0]", resp.BatchItemFailures)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func metricsTo(w io.Writer) *metrics.Emitter {
	if w == nil {
		return nil
	}
	return metrics.NewEmitter(w, "push-purchase-order")
}

func TestBatchEmitsValidEMFByProviderNeverByTenant(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	b := setup(t, func(o *options) { o.metrics = &buf })
	rc := newReceiver(t, answer(200, nil, `{"id":"m"}`))
	ref := secret(t, `{"token":"tok-metrics"}`, b.org)
	b.webhookCommand(t, rc.URL, ref)
	b.webhookCommand(t, rc.URL, ref)
	ev := b.claim(t, 10)
	ev.Records = append(ev.Records, ev.Records[0], events.SQSMessage{MessageId: "junk", Body: "{"})
	b.handle(t, ev)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d EMF lines, want 2 (function level + webhook):\n%s", len(lines), buf.String())
	}
	var byProvider, fn map[string]any
	for _, l := range lines {
		if err := metricstest.Validate([]byte(l)); err != nil {
			t.Errorf("invalid EMF: %v\n%s", err, l)
		}
		if strings.Contains(l, b.org) {
			t.Errorf("EMF line carries a tenant id: %s", l)
		}
		var doc map[string]any
		json.Unmarshal([]byte(l), &doc)
		if doc["Provider"] == "webhook" {
			byProvider = doc
		} else {
			fn = doc
		}
	}
	if byProvider["Completed"] != 2.0 || len(byProvider["ProviderLatency"].([]any)) != 2 {
		t.Errorf("provider line %v", byProvider)
	}
	// Two concurrent look-ups of one secret: counted per look-up, one AWS fetch.
	if fn["DuplicateDeliveriesIgnored"] != 1.0 || fn["MalformedMessages"] != 1.0 ||
		fn["SecretCacheMisses"].(float64)+fn["SecretCacheHits"].(float64) != 2 || b.secrets.gets.Load() != 1 {
		t.Errorf("function line %v", fn)
	}
}

// syncBuffer collects output written from several goroutines.
type syncBuffer = testenv.Buffer

// Ids arrive in whatever case the sender wrote; the job is matched in one
// canonical form, so an upper-case message starts and records its job.
func TestUpperCaseIdsInAMessageStartAndRecordTheJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: b.org}),
		EntityID: b.f.PurchaseOrder(t, b.org, "", 1)})
	ev := b.claim(t, 1)
	m, err := message.Decode(ev.Records[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	upper := message.Message{OutboxID: strings.ToUpper(m.OutboxID), OrganizationID: strings.ToUpper(m.OrganizationID),
		ConnectionID: strings.ToUpper(m.ConnectionID), CommandType: m.CommandType, ClaimToken: strings.ToUpper(m.ClaimToken)}
	if ev.Records[0].Body, err = upper.Encode(); err != nil {
		t.Fatal(err)
	}
	if resp := b.handle(t, ev); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v", resp.BatchItemFailures)
	}
	if r := b.f.Row(t, id); r.Status != "completed" || r.StartedAt == nil || r.LeaseExpiresAt != nil {
		t.Errorf("row after an upper-case message: %+v (%s), want completed", r, deref(r.LastError))
	}
}

// An idempotency key that cannot travel as a header value fails every
// attempt the same way: payload_invalid at once, without a provider call.
func TestIdempotencyKeyThatCannotBeAHeaderIsPayloadInvalid(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, answer(200, nil, `{}`))
	conn := b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: b.org, Provider: "webhook", Config: map[string]string{"url": rc.URL}})
	// A purchase order per command: per-entity order holds none back.
	var ids []string
	for _, key := range []string{"idem-1\r\nX-Injected: yes", "idem-2\n", "idem\x013", "idem\x7f4", " idem-5", strings.Repeat("k", 256)} {
		ids = append(ids, b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: conn, Provider: "webhook",
			EntityID: b.f.PurchaseOrder(t, b.org, "", 1), IdempotencyKey: key}))
	}
	fine := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: conn, Provider: "webhook",
		EntityID: b.f.PurchaseOrder(t, b.org, "", 1), IdempotencyKey: "idem\tok-" + strings.Repeat("k", 200)})
	b.handle(t, b.claim(t, 10))
	for _, id := range ids {
		r := b.f.Row(t, id)
		if r.Status != "dead_letter" || r.LastError == nil || !strings.Contains(*r.LastError, "idempotency_key") {
			t.Errorf("row %s: %s (%s), want dead_letter naming idempotency_key", id, r.Status, deref(r.LastError))
		}
		if n := b.f.Count(t, `select count(*) from external_integration_conflicts where outbox_id = $1 and conflict_type = 'payload_invalid'`, id); n != 1 {
			t.Errorf("row %s: %d payload_invalid conflicts, want 1", id, n)
		}
	}
	if r := b.f.Row(t, fine); r.Status != "completed" {
		t.Errorf("row with a valid key: %s (%s)", r.Status, deref(r.LastError))
	}
	if n := rc.Calls(); n != 1 {
		t.Errorf("provider called %d times, want once (the valid key only)", n)
	}
}

// The push holds its row's lease until the invocation ends: the lease is
// extended at start to the invocation's deadline and beyond, so no dispatch
// reclaims a job while its provider call runs.
func TestPushHoldsTheLeaseUntilTheInvocationEnds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	deadline := time.Now().Add(2 * time.Hour) // longer than the claim's 15-minute lease
	var (
		id    string
		lease atomic.Pointer[time.Time]
	)
	rc := newReceiver(t, func(_ int, r *http.Request) (int, map[string]string, string) {
		var at *time.Time // read here, mid-call; a failed read leaves it nil
		b.f.Pool.QueryRow(r.Context(), `select lease_expires_at from external_integration_outbox where id = $1`, id).Scan(&at)
		lease.Store(at)
		return 200, nil, `{}`
	})
	id = b.webhookCommand(t, rc.URL, "")
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if _, err := b.worker.Handle(ctx, b.claim(t, 1)); err != nil {
		t.Fatal(err)
	}
	got := lease.Load()
	if got == nil || got.Before(deadline) {
		t.Fatalf("lease during the provider call = %v, want at least the invocation's deadline %v", got, deadline)
	}
	if r := b.f.Row(t, id); r.Status != "completed" {
		t.Errorf("row %s (%s)", r.Status, deref(r.LastError))
	}
}

// A message that arrives after its claim's lease expired is not pushed: the
// next dispatch may already have claimed the row again.
func TestLateMessageAfterItsLeaseExpiredIsNotPushed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, answer(200, nil, `{}`))
	id := b.webhookCommand(t, rc.URL, "")
	ev := b.claim(t, 1)
	if _, err := b.f.Pool.Exec(context.Background(),
		`update external_integration_outbox set lease_expires_at = now() - interval '1 second' where id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if resp := b.handle(t, ev); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v", resp.BatchItemFailures)
	}
	if rc.Calls() != 0 {
		t.Errorf("provider called %d times for an expired claim", rc.Calls())
	}
	if r := b.f.Row(t, id); r.Status != "processing" || r.StartedAt != nil {
		t.Errorf("row %+v, want processing and not started (left to the reclaim)", r)
	}
}
