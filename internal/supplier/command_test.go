package supplier_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"integration-outbox/internal/app"
	"integration-outbox/internal/credential"
	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/message"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/push"
	"integration-outbox/internal/sqlroutine"
	"integration-outbox/internal/supplier"
	"integration-outbox/internal/testenv"
)

var (
	pg   *testenv.Postgres
	moto *testenv.Moto
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.WithPostgres(&pg), testenv.WithMoto(&moto))
}

// contactsProvider is a provider with the push_supplier capability only
// (provider.SupplierPusher), standing for Xero, QuickBooks or the webhook
// in a test of the generic path: it records what it was sent and with which
// token, and answers each supplier with a contact named after its code.
type contactsProvider struct {
	mu   sync.Mutex
	got  map[string]provider.SupplierPush // by connection id
	auth map[string]string                // token by connection id
}

func (*contactsProvider) Name() string { return "contacts" }

func (p *contactsProvider) PushSupplier(_ context.Context, conn provider.Connection, cred credential.Credential,
	cmd provider.SupplierPush) (provider.Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got[conn.ID] = cmd
	p.auth[conn.ID] = cred.Token.Reveal()
	id := "CONTACT-" + cmd.Supplier.Code
	return provider.Result{Status: provider.StatusCompleted, ExternalID: id, Document: &provider.Document{ID: id},
		Action: provider.SupplierCreated}, nil
}

// ledgerProvider takes no command of this test: its rows end unsupported.
type ledgerProvider struct{}

func (ledgerProvider) Name() string { return "ledger" }

// statementCounter counts the statements a pool sends.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if data.SQL != sqlroutine.ReadSQL { // which routines the database has: once a container
		c.n.Add(1)
	}
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// receiveAll takes every message waiting on queue, as the SQS event
// source would hand them to the function.
func receiveAll(t *testing.T, api *sqs.Client, queue string) []events.SQSMessage {
	t.Helper()
	var out []events.SQSMessage
	for {
		res, err := api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(queue),
			MaxNumberOfMessages: 10, VisibilityTimeout: 300})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Messages) == 0 {
			return out
		}
		for _, m := range res.Messages {
			out = append(out, events.SQSMessage{MessageId: aws.ToString(m.MessageId), Body: aws.ToString(m.Body)})
		}
	}
}

// The second command through the generic path, unchanged: push_supplier
// rows and a purchase order are dispatched by the real dispatcher, each to
// its command type's queue (moto); the push worker built on
// supplier.NewCommand takes the supplier queue's batch with a purchase-order
// message sent there by mistake. The supplier with a capable provider is
// completed with the provider's id as provider_reference and "created" as
// provider_status, its contact remembered for the orders; a payload that can
// never be sent is refused naming the field; a provider without the
// capability leaves its row unsupported; the stray message is acknowledged
// without effect and the order waits on its own queue. The batch costs its
// three statements (start, load, record) and one write per contact created.
func TestSupplierGoesThroughDispatchSQSAndPush(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := pg.NewDB(t)
	sqsClient := sqs.NewFromConfig(moto.AWSConfig())
	supplierQueue, orderQueue := testenv.CreateQueue(t, sqsClient, nil), testenv.CreateQueue(t, sqsClient, nil)

	org := f.NewID(t)
	token := "contacts-token-" + f.NewID(t)
	ref, _ := testenv.CreateSecret(t, secretsmanager.NewFromConfig(moto.AWSConfig()), testenv.SecretName(t, ""),
		fmt.Sprintf(`{"token":%q}`, token), org)
	contactsConn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "contacts", CredentialReference: ref})
	ledgerConn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "ledger"})
	cmd := func(conn, prov string, payload map[string]any) (row, entity string) {
		entity = f.NewID(t)
		return f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, Provider: prov,
			CommandType: supplier.CommandType, EntityID: entity, Payload: payload, IdempotencyKey: "supplier:" + entity + ":v1"}), entity
	}
	delivered, deliveredSupplier := cmd(contactsConn, "contacts", map[string]any{"name": "Acme Paper Co", "code": "SUP-0042",
		"email": "orders@acme.example", "addressLines": []string{"1 Mill Lane"}, "country": "GB", "currencyCode": "GBP"})
	refused, _ := cmd(contactsConn, "contacts", map[string]any{"email": "nameless@example.com"})
	incapable, _ := cmd(ledgerConn, "ledger", map[string]any{"name": "Fjord Fish AS"})
	po := f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: contactsConn, Provider: "contacts",
		EntityID: f.PurchaseOrder(t, org, "", 1)})

	d, err := dispatch.New(outbox.NewStore(f.Pool), sqsClient, dispatch.Config{
		Routes:    dispatch.Routes{purchaseorder.CommandType: orderQueue, supplier.CommandType: supplierQueue},
		BatchSize: 10, MaxPerRun: 100, MaxAttempts: 10, Lease: 15 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := d.Handle(ctx, json.RawMessage(`{}`)); err != nil || s.Dispatched != 4 {
		t.Fatalf("dispatch = %+v, %v; want 4 dispatched", s, err)
	}
	records := receiveAll(t, sqsClient, supplierQueue)
	if len(records) != 3 {
		t.Fatalf("%d messages on the supplier queue, want 3", len(records))
	}
	if orders := receiveAll(t, sqsClient, orderQueue); len(orders) != 1 || !strings.Contains(orders[0].Body, po) {
		t.Fatalf("the order queue holds %v, want the purchase order's message", orders)
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
	contacts := &contactsProvider{got: map[string]provider.SupplierPush{}, auth: map[string]string{}}
	store := outbox.NewStore(pool)
	if err := store.ReadTextLengths(ctx); err != nil { // as a container does at its start
		t.Fatal(err)
	}
	w, err := push.New(store, resolver, supplier.NewCommand(pool), push.Config{
		Providers: provider.NewRegistry(contacts, ledgerProvider{})})
	if err != nil {
		t.Fatal(err)
	}
	stray, err := message.Message{OutboxID: po, OrganizationID: org, ConnectionID: contactsConn,
		CommandType: purchaseorder.CommandType, ClaimToken: f.NewID(t)}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	counter.n.Store(0)
	resp, err := w.Handle(ctx, events.SQSEvent{Records: append(records, events.SQSMessage{MessageId: "stray", Body: stray})})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle = %+v, %v; want no failures", resp, err)
	}
	if n := counter.n.Load(); n != 4 {
		t.Errorf("%d statements for the batch, want 4 (start + load + record, and the one contact's write)", n)
	}

	want := map[string]struct{ status, conflict string }{
		delivered: {"completed", ""},
		refused:   {"dead_letter", "payload_invalid"},
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
	if r := f.Row(t, delivered); deref(r.ProviderReference) != "CONTACT-SUP-0042" || deref(r.ProviderStatus) != provider.SupplierCreated {
		t.Errorf("provider_reference %q, provider_status %q; want CONTACT-SUP-0042, created", deref(r.ProviderReference), deref(r.ProviderStatus))
	}
	if r := f.Row(t, refused); !strings.Contains(deref(r.LastError), "payload_json.name: is required") {
		t.Errorf("refused row's last_error %q does not name the field", deref(r.LastError))
	}
	if r := f.Row(t, incapable); !strings.Contains(deref(r.LastError), `provider "ledger" cannot take push_supplier`) {
		t.Errorf("unsupported row's last_error %q", deref(r.LastError))
	}
	var contact string
	if err := f.Pool.QueryRow(ctx, `select external_id from integration_outbox_provider_documents
		where integration_connection_id = $1 and local_entity_type = 'supplier' and local_entity_id = $2 and provider = 'contacts'`,
		contactsConn, deliveredSupplier).Scan(&contact); err != nil || contact != "CONTACT-SUP-0042" {
		t.Errorf("remembered contact %q, %v; want CONTACT-SUP-0042", contact, err)
	}
	got := contacts.got[contactsConn]
	if s := got.Supplier; len(contacts.got) != 1 || s.ID != deliveredSupplier || s.Name != "Acme Paper Co" || s.Code != "SUP-0042" ||
		s.Email != "orders@acme.example" || !slices.Equal(s.AddressLines, []string{"1 Mill Lane"}) || s.CurrencyCode != "GBP" ||
		got.IdempotencyKey != "supplier:"+deliveredSupplier+":v1" || got.Document != nil {
		t.Errorf("provider got %+v, want only Acme Paper Co, new (no document yet)", contacts.got)
	}
	if contacts.auth[contactsConn] != token {
		t.Error("the provider did not get the connection's credential from Secrets Manager")
	}
}

// Reruns cover push_supplier as they cover purchase orders: the rerun
// function built by internal/app requeues a dead-lettered supplier row and
// its dispatchNow sends it to the supplier queue (PUSH_SUPPLIER_QUEUE_URL,
// through app.Routes), not the purchase-order queue. Without that variable
// the same rerun's dispatch holds the row (queued, its attempt given back,
// last_error naming the variable) rather than ending it.
func TestRerunDispatchNowSendsASupplierToItsQueue(t *testing.T) {
	t.Parallel()
	for _, routed := range []bool{true, false} {
		t.Run(fmt.Sprintf("PUSH_SUPPLIER_QUEUE_URL set %v", routed), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := pg.NewDB(t)
			sqsClient := sqs.NewFromConfig(moto.AWSConfig())
			supplierQueue, orderQueue := testenv.CreateQueue(t, sqsClient, nil), testenv.CreateQueue(t, sqsClient, nil)
			env := map[string]string{"DATABASE_URL": f.URL, "PUSH_PURCHASE_ORDER_QUEUE_URL": orderQueue,
				"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_ENDPOINT_URL": moto.URL}
			if routed {
				env["PUSH_SUPPLIER_QUEUE_URL"] = supplierQueue
			}
			a, err := app.New(ctx, func(k string) string { return env[k] }, io.Discard, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(a.Close)
			org := f.NewID(t)
			conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "webhook",
				Config: map[string]string{"url": "https://erp.example.com/suppliers"}})
			id := f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, Provider: "webhook",
				CommandType: supplier.CommandType, EntityID: f.NewID(t), Payload: map[string]any{"name": "Acme Paper Co"},
				Status: "dead_letter", AttemptCount: 10})

			r, err := a.Rerunner(a.SQS())
			if err != nil {
				t.Fatal(err)
			}
			req, _ := json.Marshal(map[string]any{"organizationId": org, "outboxIds": []string{id}, "resetAttempts": true,
				"dispatchNow": true, "reason": "supplier endpoint fixed", "requestedBy": "ops@example.com"})
			res, err := r.Handle(ctx, req)
			if err != nil || !slices.Equal(res.Requeued, []string{id}) {
				t.Fatalf("rerun = %+v, %v; want %s requeued", res, err, id)
			}
			msgs := receiveAll(t, sqsClient, supplierQueue)
			if orders := receiveAll(t, sqsClient, orderQueue); len(orders) != 0 {
				t.Errorf("%d messages on the purchase-order queue", len(orders))
			}
			row := f.Row(t, id)
			if !routed {
				if res.Dispatched != 0 || len(msgs) != 0 || row.Status != "queued" || row.AttemptCount != 0 ||
					!strings.Contains(deref(row.LastError), "PUSH_SUPPLIER_QUEUE_URL is not set") {
					t.Errorf("without a route: dispatched %d, %d messages, row %s after %d attempts (%q); want it held, nothing sent",
						res.Dispatched, len(msgs), row.Status, row.AttemptCount, deref(row.LastError))
				}
				return
			}
			if res.Dispatched != 1 || len(msgs) != 1 || row.Status != "processing" {
				t.Fatalf("dispatched %d, %d supplier messages, row %s; want 1, 1, processing", res.Dispatched, len(msgs), row.Status)
			}
			m, err := message.Decode(msgs[0].Body)
			if err != nil || m.OutboxID != id || m.CommandType != supplier.CommandType || m.ClaimToken != deref(row.ClaimToken) {
				t.Errorf("message %+v, %v; want the row's push_supplier claim", m, err)
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
