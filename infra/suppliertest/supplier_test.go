// Package suppliertest runs push_supplier and the purchase orders that wait
// for it end to end: the real dispatch and push functions (internal/app),
// SQS and Secrets Manager on moto_server, the host's tables on a real
// PostgreSQL, and the local Xero stand-in (internal/testenv).
package suppliertest

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/app"
	"integration-outbox/internal/config"
	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/migrate"
	"integration-outbox/internal/push"
	"integration-outbox/internal/testenv"
)

var (
	pg   *testenv.Postgres
	moto *testenv.Moto
)

func TestMain(m *testing.M) { testenv.Main(m, testenv.WithPostgres(&pg), testenv.WithMoto(&moto)) }

const (
	region      = "us-east-1"
	xeroTenant  = "6f1e1c2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b"
	accessToken = "e2e-xero-access-token"
)

// stack is one host database with the functions built on it.
type stack struct {
	conn      *pgx.Conn
	a         *app.App
	sqs       *sqs.Client
	xero      *testenv.XeroStandIn
	org       string
	connID    string
	logs      *testenv.Buffer
	orders    queue
	suppliers queue
	// env is the functions' environment.
	env map[string]string
}

// queue is a command queue and its push function's worker.
type queue struct {
	url    string
	worker *push.Worker
}

func newStack(t *testing.T, shape testenv.HostShape) *stack {
	return newStackVia(t, shape, nil)
}

// newStackVia is newStack whose functions and host reach the database at
// via(url) (a pooler) when via is not nil; make migrate connects directly.
// The host's connection then sends unnamed statements, as node-postgres
// does.
func newStackVia(t *testing.T, shape testenv.HostShape, via func(url string) string) *stack {
	t.Helper()
	ctx := context.Background()
	url := pg.CreateHostDatabase(t, shape)
	if err := migrate.Up(ctx, url); err != nil {
		t.Fatalf("make migrate: %v", err)
	}
	hostCfg, err := pgx.ParseConfig(url)
	if via != nil {
		url = via(url)
		hostCfg, err = pgx.ParseConfig(url)
		if err == nil {
			hostCfg.DefaultQueryExecMode = pgx.QueryExecModeExec
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.ConnectConfig(ctx, hostCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	xero, err := testenv.StartXeroStandIn(xeroTenant, accessToken)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(xero.Close)

	awsCfg := aws.Config{Region: region, BaseEndpoint: aws.String(moto.URL),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test"}, nil
		})}
	s := &stack{conn: conn, sqs: sqs.NewFromConfig(awsCfg), xero: xero, logs: &testenv.Buffer{}}
	s.orders.url, s.suppliers.url = testenv.CreateQueue(t, s.sqs, nil), testenv.CreateQueue(t, s.sqs, nil)
	if err := conn.QueryRow(ctx, `select gen_random_uuid()::text`).Scan(&s.org); err != nil {
		t.Fatal(err)
	}
	// A new Xero connection: its OAuth2 secret as outboxctl connect writes
	// it, the access token still fresh.
	oauth, _ := json.Marshal(map[string]string{"clientId": "e2e-client", "clientSecret": "e2e-secret",
		"refreshToken": "e2e-refresh", "accessToken": accessToken,
		"accessTokenExpiresAt": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	secret, _ := testenv.CreateSecret(t, secretsmanager.NewFromConfig(awsCfg), testenv.SecretName(t, "-xero"), string(oauth), s.org)
	// maxInFlight 25: one claim takes the suppliers and their orders
	// together (with Xero's default cap the claim, oldest first, would
	// take the suppliers alone first, and the orders would not wait).
	cfg, _ := json.Marshal(map[string]any{"tenantId": xeroTenant, "accountCode": "300", "maxInFlight": 25,
		"apiBaseUrl": xero.URL + "/api.xro/2.0", "tokenUrl": xero.URL + "/connect/token"})
	if err := conn.QueryRow(ctx, `insert into integration_connections (organization_id, provider, credential_reference, config_json)
		values ($1, 'xero', $2, $3) returning id::text`, s.org, secret, string(cfg)).Scan(&s.connID); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"DATABASE_URL": url, "AWS_ENDPOINT_URL": moto.URL, "AWS_REGION": region,
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
		"PUSH_PURCHASE_ORDER_QUEUE_URL": s.orders.url, "PUSH_SUPPLIER_QUEUE_URL": s.suppliers.url,
		"WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true", "CREDENTIAL_REFERENCE_PREFIX": "integrations/",
	}
	s.env = env
	s.a = s.container(t)
	if s.orders.worker, err = s.a.PushWorker(); err != nil {
		t.Fatal(err)
	}
	if s.suppliers.worker, err = s.a.PushSupplierWorker(); err != nil {
		t.Fatal(err)
	}
	return s
}

// container builds the functions as one more Lambda container does: its
// own pool, on s.env.
func (s *stack) container(t *testing.T) *app.App {
	t.Helper()
	a, err := app.New(context.Background(), func(k string) string { return s.env[k] }, s.logs, config.NeedQueue)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

// supplier enqueues a push_supplier as the host does and returns its row.
func (s *stack) supplier(t *testing.T, supplierID, name, code string) string {
	t.Helper()
	payload, _ := json.Marshal(map[string]any{"name": name, "code": code, "email": "orders@" + code + ".example",
		"addressLines": []string{"1 Quay Street"}, "city": "Auckland", "postalCode": "1010", "country": "NZ",
		"currencyCode": "NZD", "taxNumber": "123-456-789"})
	var id string
	if err := s.conn.QueryRow(context.Background(), `select integration_outbox_enqueue($1, $2, 'push_supplier', 'supplier',
		$3, $4::jsonb, $5)::text`, s.org, s.connID, supplierID, string(payload),
		fmt.Sprintf("supplier:%s:%d", supplierID, time.Now().UnixNano())).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// newSuppliers enqueues n push_supplier commands, "Supplier <i> Ltd" with code
// "SUP-<i>", each for a new supplier id, and returns the ids and the rows.
func (s *stack) newSuppliers(t *testing.T, n int) (ids, rows []string) {
	t.Helper()
	for i := range n {
		var id string
		if err := s.conn.QueryRow(context.Background(), `select gen_random_uuid()::text`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		rows = append(rows, s.supplier(t, id, fmt.Sprintf("Supplier %d Ltd", i), fmt.Sprintf("SUP-%d", i)))
	}
	return ids, rows
}

// standIn is the host shape of our stand-in tables.
func standIn() testenv.HostShape {
	for _, sh := range testenv.HostShapes() {
		if sh.Name == "stand-in" {
			return sh
		}
	}
	panic("suppliertest: no stand-in host shape")
}

// order inserts a purchase order of two lines and enqueues its push naming
// the host's supplier (no externalSupplierId), as the host does.
func (s *stack) order(t *testing.T, number, supplierID string) (order, row string) {
	t.Helper()
	ctx := context.Background()
	if err := s.conn.QueryRow(ctx, `insert into purchase_orders (organization_id, order_number, currency_code)
		values ($1, $2, 'NZD') returning id::text`, s.org, number).Scan(&order); err != nil {
		t.Fatal(err)
	}
	if _, err := s.conn.Exec(ctx, `insert into purchase_order_lines (purchase_order_id, stock_item_id,
		ordered_quantity, purchase_unit_code, normalized_unit_code, units_per_purchase_unit_snapshot, unit_price_minor_snapshot)
		select $1, gen_random_uuid(), g, 'case', 'each', 12, 2499 from generate_series(1, 2) g`, order); err != nil {
		t.Fatal(err)
	}
	if err := s.conn.QueryRow(ctx, `select integration_outbox_enqueue($1, $2, 'push_purchase_order', 'purchase_order',
		$3, $4::jsonb, $5)::text`, s.org, s.connID, order, fmt.Sprintf(`{"supplierId": %q}`, supplierID),
		"purchase_order:"+order).Scan(&row); err != nil {
		t.Fatal(err)
	}
	return order, row
}

// run is what the schedule does until nothing is due: dispatch runs, each
// followed by its queues drained through the push functions — the
// purchase orders' first, so that an order meets its supplier's push still
// in flight, the worst order for them. It returns the dispatch runs that
// claimed something.
func (s *stack) run(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	d, err := s.a.Dispatcher(s.a.SQS())
	if err != nil {
		t.Fatal(err)
	}
	for runs := 0; runs < 10; runs++ {
		sum, err := d.Handle(ctx, json.RawMessage(`{}`))
		if err != nil {
			t.Fatalf("dispatch: %v\n%s", err, s.logs.String())
		}
		if sum.Claimed == 0 {
			return runs
		}
		for _, q := range []queue{s.orders, s.suppliers} {
			s.drain(t, q)
		}
	}
	t.Fatalf("still claiming after 10 dispatch runs\n%s", s.logs.String())
	return 0
}

func (s *stack) drain(t *testing.T, q queue) {
	t.Helper()
	if err := s.tryDrain(q); err != nil {
		t.Fatalf("%v\n%s", err, s.logs.String())
	}
}

// tryDrain hands every message of q to its worker, as Lambda's SQS event
// source would, until q is empty; it may run outside the test's goroutine.
func (s *stack) tryDrain(q queue) error {
	ctx := context.Background()
	for {
		resp, err := s.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.url), MaxNumberOfMessages: 10})
		if err != nil {
			return err
		}
		if len(resp.Messages) == 0 {
			return nil
		}
		var ev events.SQSEvent
		for _, m := range resp.Messages {
			ev.Records = append(ev.Records, events.SQSMessage{MessageId: aws.ToString(m.MessageId), Body: aws.ToString(m.Body),
				EventSource: "aws:sqs", Attributes: map[string]string{"ApproximateReceiveCount": "1"}})
			if _, err := s.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q.url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				return err
			}
		}
		hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := q.worker.Handle(hctx, ev)
		cancel()
		if err != nil || len(out.BatchItemFailures) > 0 {
			return fmt.Errorf("push: %v, failures %v", err, out.BatchItemFailures)
		}
	}
}

// row is an outbox row as this test reads it.
type row struct {
	status, reference, providerStatus, lastError string
	attempts                                     int
}

func (s *stack) row(t *testing.T, id string) row {
	t.Helper()
	var r row
	if err := s.conn.QueryRow(context.Background(), `select status::text, coalesce(provider_reference, ''),
		coalesce(provider_status, ''), coalesce(last_error, ''), attempt_count from external_integration_outbox where id = $1`,
		id).Scan(&r.status, &r.reference, &r.providerStatus, &r.lastError, &r.attempts); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSuppliersGoFirstAndTheirOrdersFollow: a new Xero connection, 5
// push_supplier commands and right after them 20 purchase orders naming
// those suppliers (4 each), all enqueued before one dispatch. The schedule
// runs until nothing is due: 5 contacts are created, each order references
// its supplier's contact, none is refused, and the wait costs no attempt.
// Then a renamed supplier updates its contact (same ContactID, new name),
// and its next order goes to the same contact; a supplier whose name
// another contact already has is linked to that contact.
func TestSuppliersGoFirstAndTheirOrdersFollow(t *testing.T) {
	t.Parallel()
	for _, shape := range testenv.HostShapes() {
		if shape.Name != "stand-in" && shape.Name != "TypeORM all at once" {
			continue
		}
		t.Run(shape.Name, func(t *testing.T) {
			t.Parallel()
			s := newStack(t, shape)
			ctx := context.Background()
			suppliers, supplierRows := s.newSuppliers(t, 5)
			orderRows := map[string]int{} // outbox row → supplier index
			orderOf := map[string]int{}   // order number → supplier index
			for i := range 20 {
				number := fmt.Sprintf("PO-%02d", i)
				_, r := s.order(t, number, suppliers[i%5])
				orderRows[r], orderOf[number] = i%5, i%5
			}

			runs := s.run(t)
			contactOf := map[string]string{} // supplier index as text → ContactID
			for i, r := range supplierRows {
				got := s.row(t, r)
				if got.status != "completed" || got.providerStatus != "created" || got.reference == "" || got.attempts != 1 {
					t.Fatalf("push_supplier %d = %+v, want completed (created) with its ContactID after one attempt", i, got)
				}
				contactOf[fmt.Sprint(i)] = got.reference
			}
			contacts := s.xero.Contacts()
			if len(contacts) != 5 {
				t.Fatalf("Xero holds %d contacts, want 5", len(contacts))
			}
			// Every create was answered: no purchase order was looked up.
			if n := s.xero.Counts()["200 OK (order search)"]; n != 0 {
				t.Errorf("%d purchase order look-ups on the normal path, want 0", n)
			}
			for _, c := range contacts {
				var i int
				if _, err := fmt.Sscanf(c.ContactNumber, "SUP-%d", &i); err != nil || contactOf[fmt.Sprint(i)] != c.ContactID ||
					c.Name != fmt.Sprintf("Supplier %d Ltd", i) {
					t.Errorf("contact %+v is not push_supplier %d's (%s)", c, i, contactOf[fmt.Sprint(i)])
				}
			}
			for r := range orderRows {
				got := s.row(t, r)
				if got.status != "completed" || got.attempts != 1 {
					t.Errorf("order row %s = %+v, want completed after one charged attempt", r, got)
				}
			}
			orders := s.xero.Orders()
			if len(orders) != 20 {
				t.Fatalf("Xero holds %d purchase orders, want 20", len(orders))
			}
			for _, o := range orders {
				if want := contactOf[fmt.Sprint(orderOf[o.Reference])]; o.ContactID != want {
					t.Errorf("purchase order %s references contact %s, want %s (its supplier's)", o.Reference, o.ContactID, want)
				}
			}
			// The orders met their suppliers' pushes in flight and waited:
			// one uncharged try each, in their history.
			var waited int
			if err := s.conn.QueryRow(ctx, `select count(distinct outbox_id) from external_integration_attempts
				where outbox_id = any($1::uuid[]) and outcome = 'failed' and error_excerpt like 'waiting for supplier %'`,
				keys(orderRows)).Scan(&waited); err != nil {
				t.Fatal(err)
			}
			if waited != 20 || runs != 2 {
				t.Errorf("%d orders waited, in %d dispatch runs; want all 20 waiting once, then going in the next run", waited, runs)
			}
			var conflicts int
			if err := s.conn.QueryRow(ctx, `select count(*) from external_integration_conflicts where organization_id = $1`,
				s.org).Scan(&conflicts); err != nil || conflicts != 0 {
				t.Errorf("%d conflicts (%v), want none", conflicts, err)
			}
			t.Logf("%d dispatch runs; Xero stand-in answers: %v", runs, s.xero.Counts())

			// Supplier 0 renamed: its contact is updated, and its next order
			// goes to the same contact.
			renamed := s.supplier(t, suppliers[0], "Supplier Zero Holdings", "SUP-0")
			_, next := s.order(t, "PO-NEXT", suppliers[0])
			s.run(t)
			if got := s.row(t, renamed); got.status != "completed" || got.providerStatus != "updated" || got.reference != contactOf["0"] {
				t.Errorf("renamed supplier's push = %+v, want completed (updated) on contact %s", got, contactOf["0"])
			}
			if got := s.row(t, next); got.status != "completed" {
				t.Errorf("the next order = %+v", got)
			}
			for _, c := range s.xero.Contacts() {
				if c.ContactID == contactOf["0"] && c.Name != "Supplier Zero Holdings" {
					t.Errorf("contact %s is still named %q after the rename", c.ContactID, c.Name)
				}
			}
			for _, o := range s.xero.Orders() {
				if o.Reference == "PO-NEXT" && o.ContactID != contactOf["0"] {
					t.Errorf("the next order references %s, want the same contact %s", o.ContactID, contactOf["0"])
				}
			}

			// A supplier whose name a contact in Xero already has is linked
			// to it, not refused, and its order goes there.
			existing := s.xero.AddContact("Existing Traders", "")
			var linkedSupplier string
			if err := s.conn.QueryRow(ctx, `select gen_random_uuid()::text`).Scan(&linkedSupplier); err != nil {
				t.Fatal(err)
			}
			linked := s.supplier(t, linkedSupplier, "Existing Traders", "SUP-EXISTING")
			_, linkedOrder := s.order(t, "PO-LINKED", linkedSupplier)
			s.run(t)
			if got := s.row(t, linked); got.status != "completed" || got.providerStatus != "linked" || got.reference != existing {
				t.Errorf("push_supplier of an existing name = %+v, want completed (linked) to %s", got, existing)
			}
			if got := s.row(t, linkedOrder); got.status != "completed" {
				t.Errorf("the linked supplier's order = %+v", got)
			}
			for _, o := range s.xero.Orders() {
				if o.Reference == "PO-LINKED" && o.ContactID != existing {
					t.Errorf("the linked supplier's order references %s, want %s", o.ContactID, existing)
				}
			}
		})
	}
}

func keys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestOneDispatchRunDeliversSuppliersAndTheirOrders: as Lambda runs them,
// the push functions drain their queues while the dispatch run is still
// going. The orders meet their suppliers' pushes in flight and wait; the
// run that sent those pushes keeps claiming while they are in flight
// (push_supplier is a prerequisite), so the orders they woke go in the
// same run: one dispatch invocation delivers all 25 commands.
func TestOneDispatchRunDeliversSuppliersAndTheirOrders(t *testing.T) {
	t.Parallel()
	s := newStack(t, standIn())
	ctx := context.Background()
	orderRows := map[string]int{}
	suppliers, supplierRows := s.newSuppliers(t, 5)
	for i := range 20 {
		_, r := s.order(t, fmt.Sprintf("PO-%02d", i), suppliers[i%5])
		orderRows[r] = i % 5
	}
	// In Lambda the push functions take a message within milliseconds of
	// its send, well inside the run's RoomWait; on a loaded test machine
	// this goroutine may not. The sender holds the run after its 25th
	// message until the orders have met their suppliers in flight, so the
	// run's next look always finds them waiting, as it would in Lambda.
	ordersWaiting := make(chan struct{})
	sender := &gatedSender{Sender: s.sqs, after: 25, gate: ordersWaiting}
	d, err := s.a.Dispatcher(sender)
	if err != nil {
		t.Fatal(err)
	}
	// The push side: once dispatch has sent the 25 messages, the orders'
	// queue first (they find their suppliers in flight), then the
	// suppliers', then whatever dispatch sends next, until it returns.
	dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	dispatching := make(chan struct{})
	drained := make(chan error, 1)
	go func() {
		defer close(drained)
		for s.visible(s.orders.url)+s.visible(s.suppliers.url) < 25 {
			select {
			case <-dispatching: // dispatch ended without sending them all
				drained <- nil
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		err := s.tryDrain(s.orders)
		close(ordersWaiting)
		if err != nil {
			drained <- err
			return
		}
		for {
			for _, q := range []queue{s.orders, s.suppliers} {
				if err := s.tryDrain(q); err != nil {
					drained <- err
					return
				}
			}
			select {
			case <-dispatching:
				drained <- s.tryDrain(s.orders)
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	sum, err := d.Handle(dctx, json.RawMessage(`{}`))
	close(dispatching)
	if err := <-drained; err != nil {
		t.Fatalf("draining: %v\n%s", err, s.logs.String())
	}
	if err != nil {
		t.Fatalf("dispatch: %v\n%s", err, s.logs.String())
	}
	if sum.Claimed != 45 || sum.Dispatched != 45 {
		t.Errorf("one dispatch run %+v, want 45 claimed and sent: 25, then the 20 orders again once their suppliers ended", sum)
	}
	for _, r := range supplierRows {
		if got := s.row(t, r); got.status != "completed" {
			t.Errorf("push_supplier %s = %+v", r, got)
		}
	}
	for r := range orderRows {
		if got := s.row(t, r); got.status != "completed" || got.attempts != 1 {
			t.Errorf("order row %s = %+v, want completed after one charged attempt", r, got)
		}
	}
	if n := len(s.xero.Orders()); n != 20 {
		t.Errorf("Xero holds %d purchase orders, want 20", n)
	}
}

// gatedSender sends through Sender and, once it has sent after messages,
// returns only when gate is closed (or its context ends).
type gatedSender struct {
	dispatch.Sender
	after int
	gate  <-chan struct{}
	sent  atomic.Int64
}

func (g *gatedSender) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	out, err := g.Sender.SendMessageBatch(ctx, in, opts...)
	if err != nil {
		return out, err
	}
	if g.sent.Add(int64(len(in.Entries))) >= int64(g.after) {
		select {
		case <-g.gate:
		case <-ctx.Done():
		}
	}
	return out, err
}

// visible is the queue's approximate number of visible messages (0 when
// SQS does not answer).
func (s *stack) visible(url string) int {
	out, err := s.sqs.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages}})
	if err != nil {
		return 0
	}
	var n int
	fmt.Sscan(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)], &n)
	return n
}
