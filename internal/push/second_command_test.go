package push_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/push"
	"integration-outbox/internal/testenv"
)

// A second command type that exists only here: push_stock_count sends a
// stock count (a table of its own, standing in for another host table) to
// providers with the stockCountPusher capability. It is written the way
// docs/adding-a-command.md says a real one is, and goes through the real
// dispatcher, SQS (moto) and the push worker with no change to
// internal/outbox: proof that the core is command-agnostic.

const stockCountCommandType = "push_stock_count"

// stockCountsTableSQL is the stand-in host table of the test command.
const stockCountsTableSQL = `
create table stock_counts (
    id uuid primary key default gen_random_uuid(),
    organization_id uuid not null,
    location_id uuid,
    stock_item_id text not null,
    quantity integer not null
)`

// loadStockCountsSQL is the command's one statement per SQS batch: each
// job's count, organization scoped and location scoped when the
// connection has a location.
const loadStockCountsSQL = `
select r.outbox_id, s.stock_item_id, s.quantity
from unnest($1::text[], $2::text[]::uuid[], $3::text[]::uuid[], $4::text[]::uuid[])
    as r(outbox_id, organization_id, count_id, location_id)
join stock_counts s on s.id = r.count_id and s.organization_id = r.organization_id
    and (r.location_id is null or s.location_id = r.location_id)`

// stockCount is the request a provider gets.
type stockCount struct {
	IdempotencyKey string `json:"idempotencyKey"`
	StockItemID    string `json:"stockItemId"`
	Quantity       int    `json:"quantity"`
}

// stockCountPusher is the command's provider capability.
type stockCountPusher interface {
	provider.Provider
	PushStockCount(ctx context.Context, conn provider.Connection, cred credential.Credential, c stockCount) (provider.Result, error)
}

type stockCountCommand struct{ db *pgxpool.Pool }

func (stockCountCommand) Type() string { return stockCountCommandType }

func (stockCountCommand) Supports(p provider.Provider) bool {
	_, ok := p.(stockCountPusher)
	return ok
}

func (c stockCountCommand) Load(ctx context.Context, jobs []outbox.Job) ([]push.Delivery, error) {
	var ids, orgs, counts []string
	var locations []*string
	for _, j := range jobs {
		ids, orgs, counts = append(ids, j.ID), append(orgs, j.OrganizationID), append(counts, j.LocalEntityID)
		var loc *string
		if j.Connection.LocationID != "" {
			loc = &j.Connection.LocationID
		}
		locations = append(locations, loc)
	}
	rows, err := c.db.Query(ctx, loadStockCountsSQL, ids, orgs, counts, locations)
	if err != nil {
		return nil, fmt.Errorf("loading stock counts: %w", err)
	}
	found := map[string]stockCount{}
	var id string
	var sc stockCount
	if _, err := pgx.ForEachRow(rows, []any{&id, &sc.StockItemID, &sc.Quantity}, func() error {
		found[id] = sc
		return nil
	}); err != nil {
		return nil, fmt.Errorf("loading stock counts: %w", err)
	}
	out := make([]push.Delivery, len(jobs))
	for i, j := range jobs {
		sc, ok := found[j.ID]
		if !ok {
			out[i] = push.Refuse(outbox.ConflictEntityNotFound, "stock count "+j.LocalEntityID+" not found for the organization")
			continue
		}
		sc.IdempotencyKey = j.IdempotencyKey
		out[i] = push.Delivery{Send: func(ctx context.Context, p provider.Provider, conn provider.Connection,
			cred credential.Credential) (provider.Result, error) {
			return p.(stockCountPusher).PushStockCount(ctx, conn, cred, sc)
		}}
	}
	return out, nil
}

// inventoryProvider is a fake provider with the stockCountPusher
// capability; it records what it was sent and with which token.
type inventoryProvider struct {
	mu   sync.Mutex
	got  map[string]stockCount // by connection id
	auth map[string]string     // token by connection id
}

func (*inventoryProvider) Name() string { return "inventory" }

func (p *inventoryProvider) PushStockCount(_ context.Context, conn provider.Connection, cred credential.Credential,
	c stockCount) (provider.Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got[conn.ID] = c
	p.auth[conn.ID] = cred.Token.Reveal()
	return provider.Result{Status: provider.StatusCompleted, ExternalID: "INV-" + c.StockItemID}, nil
}

func TestTestOnlyCommandGoesThroughDispatchSQSAndPushWithoutOutboxChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := pg.NewDB(t)
	if _, err := f.Pool.Exec(ctx, stockCountsTableSQL); err != nil {
		t.Fatal(err)
	}
	sqsClient := sqs.NewFromConfig(moto.AWSConfig())
	stockQueue, orderQueue := testenv.CreateQueue(t, sqsClient, nil), testenv.CreateQueue(t, sqsClient, nil)

	org, otherOrg := f.NewID(t), f.NewID(t)
	count := func(org, location, item string, qty int) string {
		var id string
		if err := f.Pool.QueryRow(ctx, `insert into stock_counts (organization_id, location_id, stock_item_id, quantity)
			values ($1, nullif($2, '')::uuid, $3, $4) returning id::text`, org, location, item, qty).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	token := "inv-token-" + f.NewID(t)
	ref := secret(t, fmt.Sprintf(`{"token":%q}`, token), org)
	inventoryConn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "inventory", CredentialReference: ref})
	sandboxConn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org}) // no stock-count capability
	cmd := func(conn, entity string) string {
		return f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, Provider: "inventory",
			CommandType: stockCountCommandType, EntityID: entity, Payload: map[string]any{}})
	}
	delivered := cmd(inventoryConn, count(org, "", "SKU-1", 7))
	foreign := cmd(inventoryConn, count(otherOrg, "", "SKU-2", 9)) // another tenant's count
	incapable := cmd(sandboxConn, count(org, "", "SKU-3", 1))
	po := f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: sandboxConn, EntityID: f.PurchaseOrder(t, org, "", 1)})

	// The dispatcher routes each command type to its queue.
	d, err := dispatch.New(outbox.NewStore(f.Pool), sqsClient, dispatch.Config{
		Routes:    dispatch.Routes{purchaseorder.CommandType: orderQueue, stockCountCommandType: stockQueue},
		BatchSize: 10, MaxPerRun: 100, MaxAttempts: 10, Lease: 15 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := d.Handle(ctx, json.RawMessage(`{}`)); err != nil || s.Dispatched != 4 {
		t.Fatalf("dispatch = %+v, %v; want 4 dispatched", s, err)
	}

	// The stock-count queue holds exactly the three stock-count messages.
	var records []events.SQSMessage
	for {
		out, err := sqsClient.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(stockQueue),
			MaxNumberOfMessages: 10, VisibilityTimeout: 300})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			break
		}
		for _, m := range out.Messages {
			records = append(records, events.SQSMessage{MessageId: aws.ToString(m.MessageId), Body: aws.ToString(m.Body)})
		}
	}
	if len(records) != 3 {
		t.Fatalf("%d messages on the stock-count queue, want 3", len(records))
	}

	counter := &statementCounter{}
	cfg, err := pgxpool.ParseConfig(f.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	resolver, err := credential.NewResolver(secretsmanager.NewFromConfig(moto.AWSConfig()),
		credential.ResolverConfig{Prefix: "integrations/", Region: "us-east-1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	inv := &inventoryProvider{got: map[string]stockCount{}, auth: map[string]string{}}
	// As a container at its start (internal/app): the batch then costs
	// three statements.
	store := outbox.NewStore(pool)
	if err := store.ReadTextLengths(context.Background()); err != nil {
		t.Fatal(err)
	}
	counter.n.Store(0)
	w, err := push.New(store, resolver, stockCountCommand{db: pool}, push.Config{
		Providers: provider.NewRegistry(inv, provider.NewSandbox(provider.SandboxConfig{}))})
	if err != nil {
		t.Fatal(err)
	}
	// A purchase-order message sent to this function by mistake is not its
	// business: acknowledged without effect.
	stray, err := json.Marshal(map[string]string{"outboxId": po, "organizationId": org, "connectionId": sandboxConn,
		"commandType": purchaseorder.CommandType, "claimToken": f.NewID(t)})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := w.Handle(ctx, events.SQSEvent{Records: append(records, events.SQSMessage{MessageId: "stray", Body: string(stray)})})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle = %+v, %v; want no failures", resp, err)
	}

	if n := counter.n.Load(); n != 3 {
		t.Errorf("%d statements for the batch, want 3 (start + load + record)", n)
	}
	want := map[string]struct{ status, conflict string }{
		delivered: {"completed", ""},
		foreign:   {"dead_letter", "entity_not_found"},
		incapable: {"unsupported", ""},
		po:        {"processing", ""}, // claimed, on the other queue, untouched here
	}
	for id, w := range want {
		r := f.Row(t, id)
		var conflict string
		if w.conflict != "" {
			if err := f.Pool.QueryRow(ctx, `select conflict_type from external_integration_conflicts where outbox_id = $1`,
				id).Scan(&conflict); err != nil {
				t.Errorf("row %s: conflict: %v", id, err)
			}
		}
		if r.Status != w.status || conflict != w.conflict {
			t.Errorf("row %s: %s (conflict %q, last_error %q), want %s (%q)", id, r.Status, conflict, deref(r.LastError), w.status, w.conflict)
		}
	}
	if r := f.Row(t, delivered); deref(r.ProviderReference) != "INV-SKU-1" {
		t.Errorf("provider_reference = %q, want INV-SKU-1", deref(r.ProviderReference))
	}
	if r := f.Row(t, incapable); !strings.Contains(deref(r.LastError), `provider "sandbox" cannot take push_stock_count`) {
		t.Errorf("unsupported row's last_error = %q", deref(r.LastError))
	}
	got := inv.got[inventoryConn]
	if len(inv.got) != 1 || got.StockItemID != "SKU-1" || got.Quantity != 7 || got.IdempotencyKey == "" {
		t.Errorf("provider got %+v, want only SKU-1 × 7", inv.got)
	}
	if inv.auth[inventoryConn] != token {
		t.Error("the provider did not get the connection's credential from Secrets Manager")
	}
}

// The outbox core names no command type and no entity: adding a command
// never edits it. A check of its production sources, so that a future
// shortcut (a join to a command's table, a switch on a command type) fails
// here.
func TestOutboxCoreNamesNoCommandOrEntity(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "outbox", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("outbox sources: %v, %v", files, err)
	}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ToLower(string(src))
		for _, name := range []string{purchaseorder.CommandType, "purchase_order", "purchaseorder", "purchase order"} {
			if strings.Contains(text, name) {
				t.Errorf("%s names %q: the outbox core must stay command-agnostic", path, name)
			}
		}
	}
}

// brokenLoad is the purchase-order command whose load fails, as when the
// database drops the connection between start and load.
type brokenLoad struct{ push.Command }

func (brokenLoad) Load(context.Context, []outbox.Job) ([]push.Delivery, error) {
	return nil, fmt.Errorf("loading purchase orders: %w", context.DeadlineExceeded)
}

// A load that fails costs the jobs an attempt but no provider call: they are
// failed with the cause and retried after the backoff, not left to wait for
// their lease to expire.
func TestJobsWhoseEntityCannotBeLoadedAreRetriedWithoutACall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, answer(200, nil, `{"id":"EXT"}`))
	id := b.webhookCommand(t, rc.URL, "")
	resolver, err := credential.NewResolver(b.secrets, credential.ResolverConfig{Prefix: "integrations/", Region: "us-east-1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	w, err := push.New(b.store, resolver, brokenLoad{purchaseorder.NewCommand(b.f.Pool)}, push.Config{
		Providers: provider.NewRegistry(provider.NewWebhook(provider.WebhookConfig{AllowPrivateNetworks: true, Timeout: 2 * time.Second})),
		Jitter:    func() float64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := w.Handle(context.Background(), b.claim(t, 10))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle = %+v, %v", resp, err)
	}
	r := b.f.Row(t, id)
	if r.Status != "failed" || !strings.Contains(deref(r.LastError), "loading the command's entity") ||
		r.RetryInSeconds == nil || *r.RetryInSeconds < 25 {
		t.Errorf("row = %s, last_error %q, retry in %v; want failed with the load error, retried after the backoff",
			r.Status, deref(r.LastError), r.RetryInSeconds)
	}
	if n := rc.Calls(); n != 0 {
		t.Errorf("provider called %d times", n)
	}
}
