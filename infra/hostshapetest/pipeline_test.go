package hostshapetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/app"
	"integration-outbox/internal/config"
	"integration-outbox/internal/migrate"
	"integration-outbox/internal/push"
	"integration-outbox/internal/report"
	"integration-outbox/internal/schemacheck"
	"integration-outbox/internal/testenv"
)

var (
	pg   *testenv.Postgres
	moto *testenv.Moto
)

func TestMain(m *testing.M) { testenv.Main(m, testenv.WithPostgres(&pg), testenv.WithMoto(&moto)) }

const region = "us-east-1"

// supplier is the receiver's answer per purchase order: what the test
// makes each order's supplier say.
type supplier struct {
	mu      sync.Mutex
	answers map[string][]answer // order id → answers, the last one repeated
	calls   map[string]int
}

type answer struct {
	status int
	header map[string]string
	body   string
}

func (s *supplier) serve(_ int, w http.ResponseWriter, r *http.Request) {
	var doc struct {
		PurchaseOrder struct {
			ID string `json:"id"`
		} `json:"purchaseOrder"`
	}
	json.NewDecoder(r.Body).Decode(&doc)
	s.mu.Lock()
	id := doc.PurchaseOrder.ID
	n := s.calls[id]
	s.calls[id]++
	as := s.answers[id]
	s.mu.Unlock()
	a := answer{status: http.StatusCreated, body: fmt.Sprintf(`{"id": "ERP-%s"}`, id)}
	if len(as) > 0 {
		a = as[min(n, len(as)-1)]
	}
	for k, v := range a.header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	io.WriteString(w, a.body)
}

func (s *supplier) say(order string, as ...answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers[order] = as
}

// pipeline is one host database with the functions built on it.
type pipeline struct {
	t       *testing.T
	conn    *pgx.Conn
	a       *app.App
	queue   string
	sqs     *sqs.Client
	org     string
	connID  string
	logs    *testenv.Buffer
	supply  *supplier
	webhook string
	// worker is the push function's worker, built once as a container
	// builds it (its store keeps what it read of the host's tables).
	worker *push.Worker
}

// TestThePipelineRunsOnEveryHostShape: on each host shape the contract
// accepts, make migrate installs, the schema check passes, and the real
// handlers deliver a command, retry one at the second its provider asked
// for (Retry-After: 120, longer than the
// backoff of a first attempt), dead-letter one whose provider rejects it with a
// 5 kB error body (its conflict opened, every text cut to the host's
// columns), rerun that one and deliver it, and inspect the rows.
func TestThePipelineRunsOnEveryHostShape(t *testing.T) {
	t.Parallel()
	for _, shape := range testenv.HostShapes() {
		if len(shape.Refused) > 0 {
			continue // TestEveryStatementPreparesOnEveryHostShape (internal/schemacheck) covers the refusals
		}
		t.Run(shape.Name, func(t *testing.T) {
			t.Parallel()
			p := newPipeline(t, shape)
			ctx := context.Background()

			delivered := p.order(t, "PO-1")
			retried := p.order(t, "PO-2")
			rejected := p.order(t, "PO-3")
			p.supply.say(retried, answer{status: 503, header: map[string]string{"Retry-After": "120"}, body: `{"error":"busy"}`},
				answer{status: 201, body: `{"id":"ERP-2"}`})
			p.supply.say(rejected, answer{status: 422, body: `{"error":"` + strings.Repeat("supplier refuses this order; ", 180) + `"}`},
				answer{status: 201, body: `{"id":"` + strings.Repeat("R", 300) + `"}`})
			ids := map[string]string{}
			for _, o := range []string{delivered, retried, rejected} {
				ids[o] = p.enqueue(t, o)
			}

			p.run(t)
			p.expect(t, ids[delivered], "completed")
			if ref := p.text(t, `select provider_reference from external_integration_outbox where id = $1`, ids[delivered]); ref != "ERP-"+delivered {
				t.Errorf("provider_reference %q", ref)
			}

			// Retried at the second the provider asked for: the time is exact
			// whatever the database's TimeZone and the column's type.
			p.expect(t, ids[retried], "failed")
			var in float64
			if err := p.conn.QueryRow(ctx, `select extract(epoch from next_attempt_at - now()) from external_integration_outbox where id = $1`,
				ids[retried]).Scan(&in); err != nil {
				t.Fatal(err)
			}
			if in < 118 || in > 121 {
				t.Errorf("Retry-After: 120 scheduled the retry %.1f s from now", in)
			}

			// Dead-lettered with its conflict; the 5 kB answer cut to fit.
			p.expect(t, ids[rejected], "dead_letter")
			summary := p.text(t, `select summary from external_integration_conflicts where outbox_id = $1 and status = 'open'`, ids[rejected])
			if summary == "" {
				t.Fatal("no open conflict for the dead-lettered row")
			}
			p.fits(t, "external_integration_conflicts", "summary", summary)
			p.fits(t, "external_integration_outbox", "last_error",
				p.text(t, `select last_error from external_integration_outbox where id = $1`, ids[rejected]))

			// The operators' views give the absolute times, whatever the
			// column's type and the database's TimeZone.
			rows, _, err := p.a.Report().List(ctx, report.ListParams{OrganizationID: p.org, Status: "failed"})
			if err != nil {
				t.Fatalf("list: %v", err)
			}
			if len(rows) != 1 || rows[0].NextAttemptAt == nil {
				t.Fatalf("list of failed rows: %+v", rows)
			}
			if d := time.Until(*rows[0].NextAttemptAt); d < 110*time.Second || d > 125*time.Second {
				t.Errorf("the failed view shows the retry %s from now, want 120 s", d)
			}
			if d := time.Since(rows[0].CreatedAt); d < 0 || d > time.Minute {
				t.Errorf("the failed view shows the row created %s ago", d)
			}

			// The retry, once due.
			if _, err := p.conn.Exec(ctx, `update external_integration_outbox set next_attempt_at = now() - interval '1 second' where id = $1`, ids[retried]); err != nil {
				t.Fatal(err)
			}
			p.run(t)
			p.expect(t, ids[retried], "completed")

			// The operator reruns the dead letter; its conflict is resolved.
			rr, err := p.a.Rerunner(p.a.SQS())
			if err != nil {
				t.Fatal(err)
			}
			payload, _ := json.Marshal(map[string]any{"organizationId": p.org, "outboxIds": []string{ids[rejected]},
				"resetAttempts": true, "reason": "supplier fixed their endpoint", "requestedBy": "ops@example.com"})
			res, err := rr.Handle(ctx, payload)
			if err != nil {
				t.Fatalf("rerun: %v", err)
			}
			if len(res.Requeued) != 1 {
				t.Fatalf("rerun requeued %v, skipped %v", res.Requeued, res.Skipped)
			}
			if st := p.text(t, `select status::text from external_integration_conflicts where outbox_id = $1`, ids[rejected]); st != "resolved" {
				t.Errorf("the rerun left the conflict %s", st)
			}
			p.run(t)
			p.expect(t, ids[rejected], "completed")
			p.fits(t, "external_integration_outbox", "provider_reference",
				p.text(t, `select provider_reference from external_integration_outbox where id = $1`, ids[rejected]))

			// Inspected: the row, its three attempts and its conflict.
			in2, _ := json.Marshal(map[string]string{"organizationId": p.org, "outboxId": ids[rejected]})
			got, err := p.a.Inspector().Handle(ctx, in2)
			if err != nil {
				t.Fatalf("inspect: %v", err)
			}
			if !got.Found || len(got.Attempts) != 2 || len(got.Conflicts) != 1 || len(got.Reruns) != 1 {
				t.Errorf("inspect: found %t, %d attempts, %d conflicts, %d reruns; want 2 attempts, 1 conflict, 1 rerun",
					got.Found, len(got.Attempts), len(got.Conflicts), len(got.Reruns))
			}
			if strings.Contains(p.logs.String(), `"level":"ERROR"`) {
				t.Errorf("the functions logged errors:\n%s", p.logs.String())
			}
		})
	}
}

func newPipeline(t *testing.T, shape testenv.HostShape) *pipeline {
	t.Helper()
	ctx := context.Background()
	url := pg.CreateHostDatabase(t, shape)
	if err := migrate.Up(ctx, url); err != nil {
		t.Fatalf("make migrate: %v", err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	r, err := schemacheck.Run(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}

	awsCfg := aws.Config{Region: region, BaseEndpoint: aws.String(moto.URL),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test"}, nil
		})}
	sqsc := sqs.NewFromConfig(awsCfg)
	queue := testenv.CreateQueue(t, sqsc, nil)
	p := &pipeline{t: t, conn: conn, queue: queue, sqs: sqsc, logs: &testenv.Buffer{},
		supply: &supplier{answers: map[string][]answer{}, calls: map[string]int{}}}
	hook := testenv.NewReceiver(t, p.supply.serve)
	p.webhook = hook.URL + "/orders"

	if err := conn.QueryRow(ctx, `select gen_random_uuid()::text`).Scan(&p.org); err != nil {
		t.Fatal(err)
	}
	secret, _ := testenv.CreateSecret(t, secretsmanager.NewFromConfig(awsCfg), testenv.SecretName(t, "-hook"),
		`{"token":"tok","signingSecret":"whsec-1"}`, p.org)
	if err := conn.QueryRow(ctx, `insert into integration_connections (organization_id, provider, credential_reference, config_json)
		values ($1, 'webhook', $2, $3) returning id::text`, p.org, secret, fmt.Sprintf(`{"url": %q}`, p.webhook)).Scan(&p.connID); err != nil {
		t.Fatal(err)
	}

	env := map[string]string{
		"DATABASE_URL": url, "AWS_ENDPOINT_URL": moto.URL, "AWS_REGION": region,
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
		"PUSH_PURCHASE_ORDER_QUEUE_URL": queue, "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
		"CREDENTIAL_REFERENCE_PREFIX": "integrations/", "MAX_ATTEMPTS": "5",
	}
	a, err := app.New(ctx, func(k string) string { return env[k] }, p.logs, config.NeedQueue)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	p.a = a
	return p
}

// order inserts a purchase order with two lines, through the contract's
// columns only, and returns its id.
func (p *pipeline) order(t *testing.T, number string) string {
	t.Helper()
	var id string
	if err := p.conn.QueryRow(context.Background(), `insert into purchase_orders (organization_id, order_number, currency_code)
		values ($1, $2, 'EUR') returning id::text`, p.org, number).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := p.conn.Exec(context.Background(), `insert into purchase_order_lines (purchase_order_id, stock_item_id,
		ordered_quantity, purchase_unit_code, normalized_unit_code, units_per_purchase_unit_snapshot, unit_price_minor_snapshot)
		select $1, gen_random_uuid(), g, 'case', 'each', 12, 2499 from generate_series(1, 2) g`, id); err != nil {
		t.Fatal(err)
	}
	return id
}

// enqueue puts the order's push in the outbox as the host does.
func (p *pipeline) enqueue(t *testing.T, order string) string {
	t.Helper()
	var id string
	if err := p.conn.QueryRow(context.Background(), `select integration_outbox_enqueue($1, $2, 'push_purchase_order',
		'purchase_order', $3, $4::jsonb, $5)::text`, p.org, p.connID, order, `{"externalSupplierId":"SUP-1"}`,
		"purchase_order:"+order).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// run is one dispatch run, then the queue drained through the push
// function; either failing fails the test.
func (p *pipeline) run(t *testing.T) { p.runs(t, true) }

// runAllowingErrors is run where the host's tables refuse statements: the
// dispatch may fail; the push is drained all the same.
func (p *pipeline) runAllowingErrors(t *testing.T) { p.runs(t, false) }

func (p *pipeline) runs(t *testing.T, strict bool) {
	t.Helper()
	ctx := context.Background()
	d, err := p.a.Dispatcher(p.a.SQS())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Handle(ctx, json.RawMessage(`{}`)); err != nil && strict {
		t.Fatalf("dispatch: %v\n%s", err, p.logs.String())
	}
	if p.worker == nil {
		if p.worker, err = p.a.PushWorker(); err != nil {
			t.Fatal(err)
		}
	}
	w := p.worker
	for {
		resp, err := p.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(p.queue), MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Messages) == 0 {
			return
		}
		var ev events.SQSEvent
		for _, m := range resp.Messages {
			ev.Records = append(ev.Records, events.SQSMessage{MessageId: aws.ToString(m.MessageId), Body: aws.ToString(m.Body),
				EventSource: "aws:sqs", Attributes: map[string]string{"ApproximateReceiveCount": "1"}})
			if _, err := p.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(p.queue), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
		hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := w.Handle(hctx, ev)
		cancel()
		if err != nil || (strict && len(out.BatchItemFailures) > 0) {
			t.Fatalf("push: %v, failures %v\n%s", err, out.BatchItemFailures, p.logs.String())
		}
	}
}

func (p *pipeline) text(t *testing.T, sql string, args ...any) string {
	t.Helper()
	var s *string
	if err := p.conn.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil && err != pgx.ErrNoRows {
		t.Fatal(err)
	}
	if s == nil {
		return ""
	}
	return *s
}

func (p *pipeline) expect(t *testing.T, id, status string) {
	t.Helper()
	if got := p.text(t, `select status::text from external_integration_outbox where id = $1`, id); got != status {
		t.Fatalf("row %s is %s, want %s (last_error %q)\n%s", id, got, status,
			p.text(t, `select last_error from external_integration_outbox where id = $1`, id), p.logs.String())
	}
}

// fits checks that value fits the column's declared length, and is cut
// with its mark where it would not have.
func (p *pipeline) fits(t *testing.T, table, column, value string) {
	t.Helper()
	var n int
	if err := p.conn.QueryRow(context.Background(), `select coalesce(character_maximum_length, 0)
		from information_schema.columns where table_name = $1 and column_name = $2 and table_schema = current_schema()`,
		table, column).Scan(&n); err != nil {
		t.Fatal(err)
	}
	chars := len([]rune(value))
	switch {
	case n > 0 && chars > n:
		t.Errorf("%s.%s holds %d characters, more than its %d", table, column, chars, n)
	case n > 0 && chars == n && !strings.HasSuffix(value, "…"):
		t.Errorf("%s.%s was cut to %d characters without the mark", table, column, n)
	case n == 0 && chars < 200:
		t.Errorf("%s.%s holds only %d characters though it has no length: %q", table, column, chars, value)
	}
}
