package opstest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"integration-outbox/internal/app"
	"integration-outbox/internal/dispatch"
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

var seq atomic.Int64

// pipeline is the functions' real composition (internal/app) on a fresh
// database and a moto queue, writing logs and EMF lines to out.
type pipeline struct {
	f     *testenv.Fixture
	app   *app.App
	out   *testenv.Buffer
	queue string
	// supplierQueue is push_supplier's queue (PUSH_SUPPLIER_QUEUE_URL).
	supplierQueue string
	org           string
	sqs           *sqs.Client
}

func newPipeline(t *testing.T) *pipeline {
	t.Helper()
	return newPipelineWith(t, nil)
}

// newPipelineWith is newPipeline with more environment variables.
func newPipelineWith(t *testing.T, extra map[string]string) *pipeline {
	t.Helper()
	ctx := context.Background()
	f := pg.NewDB(t)
	sq := sqs.NewFromConfig(moto.AWSConfig())
	queue, supplierQueue := testenv.CreateQueue(t, sq, nil), testenv.CreateQueue(t, sq, nil)
	env := map[string]string{
		"DATABASE_URL": f.URL, "PUSH_PURCHASE_ORDER_QUEUE_URL": queue, "PUSH_SUPPLIER_QUEUE_URL": supplierQueue, "AWS_REGION": "us-east-1",
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_ENDPOINT_URL": moto.URL,
		"WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true", "PROVIDER_TIMEOUT": "5s", "AWS_LAMBDA_LOG_LEVEL": "INFO",
	}
	for k, v := range extra {
		env[k] = v
	}
	out := &testenv.Buffer{}
	a, err := app.New(ctx, func(k string) string { return env[k] }, out, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return &pipeline{f: f, app: a, out: out, queue: queue, supplierQueue: supplierQueue, org: f.NewID(t), sqs: sq}
}

// webhook inserts a webhook connection to url with a tagged credential.
func (p *pipeline) webhook(t *testing.T, url string) string {
	t.Helper()
	name, _ := testenv.CreateSecret(t, secretsmanager.NewFromConfig(moto.AWSConfig()), testenv.SecretName(t, ""), `{"token":"tok"}`, p.org)
	return p.f.Connection(t, testenv.ConnectionOpts{OrganizationID: p.org, Provider: "webhook",
		CredentialReference: name, Config: map[string]string{"url": url}})
}

// command inserts a purchase order and its push command on conn.
func (p *pipeline) command(t *testing.T, conn string) string {
	t.Helper()
	po := p.f.PurchaseOrder(t, p.org, "", 1)
	return p.f.Command(t, testenv.CommandOpts{OrganizationID: p.org, ConnectionID: conn, Provider: "webhook",
		EntityID: po, IdempotencyKey: "idem-" + po})
}

// supplier inserts a push_supplier command on conn.
func (p *pipeline) supplier(t *testing.T, conn string) string {
	t.Helper()
	id := p.f.NewID(t)
	return p.f.Command(t, testenv.CommandOpts{OrganizationID: p.org, ConnectionID: conn, Provider: "webhook",
		CommandType: "push_supplier", EntityType: "supplier", EntityID: id,
		Payload: map[string]any{"name": "Supplier " + id, "code": "SUP-" + id[:8]}, IdempotencyKey: "supplier:" + id})
}

// tick runs dispatch once and pushes every purchase-order message it sent,
// as the SQS event source would, in batches of 10 (push_supplier messages
// wait on their own queue: drainSuppliers).
func (p *pipeline) tick(t *testing.T) {
	t.Helper()
	p.tickIn(t, context.Background())
}

// tickIn is tick with the push invocations' context (a Lambda request).
func (p *pipeline) tickIn(t *testing.T, ctx context.Context) {
	t.Helper()
	d, err := p.app.Dispatcher(p.app.SQS())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Run(ctx, dispatch.Request{}); err != nil {
		t.Fatal(err)
	}
	w, err := p.app.PushWorker()
	if err != nil {
		t.Fatal(err)
	}
	p.drain(t, ctx, p.queue, w)
}

// drainSuppliers pushes every message waiting on the push_supplier queue
// through the push-supplier function's worker.
func (p *pipeline) drainSuppliers(t *testing.T) {
	t.Helper()
	w, err := p.app.PushSupplierWorker()
	if err != nil {
		t.Fatal(err)
	}
	p.drain(t, context.Background(), p.supplierQueue, w)
}

// drain hands every message of queue to w in batches of 10, as the SQS
// event source would.
func (p *pipeline) drain(t *testing.T, ctx context.Context, queue string, w *push.Worker) {
	t.Helper()
	for {
		msgs, err := p.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &queue, MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs.Messages) == 0 {
			return
		}
		var ev events.SQSEvent
		for _, m := range msgs.Messages {
			ev.Records = append(ev.Records, events.SQSMessage{MessageId: *m.MessageId, Body: *m.Body})
			if _, err := p.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &queue, ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.Handle(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
}

// provider is a local webhook endpoint answering with status().
func provider(t *testing.T, status func() int) *testenv.Receiver {
	return testenv.NewReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		s := status()
		w.WriteHeader(s)
		if s < 300 {
			fmt.Fprintf(w, `{"id":"EXT-%d"}`, seq.Add(1))
		}
	})
}

// emfLine is one EMF document the functions wrote.
type emfLine struct {
	Namespace string
	Dims      map[string]string // dimension name → value
	Values    map[string][]float64
}

// emfLines reads the EMF documents among the log lines in out, from offset.
func emfLines(t *testing.T, out []byte) []emfLine {
	t.Helper()
	var res []emfLine
	for _, l := range bytes.Split(out, []byte("\n")) {
		var doc map[string]json.RawMessage
		if json.Unmarshal(l, &doc) != nil || doc["_aws"] == nil {
			continue
		}
		var meta struct {
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
				Metrics    []struct{ Name string }
			}
		}
		if err := json.Unmarshal(doc["_aws"], &meta); err != nil {
			t.Fatalf("EMF metadata: %v", err)
		}
		for _, d := range meta.CloudWatchMetrics {
			for _, set := range d.Dimensions {
				e := emfLine{Namespace: d.Namespace, Dims: map[string]string{}, Values: map[string][]float64{}}
				for _, k := range set {
					var v string
					json.Unmarshal(doc[k], &v)
					e.Dims[k] = v
				}
				for _, m := range d.Metrics {
					var one float64
					var many []float64
					if json.Unmarshal(doc[m.Name], &one) == nil {
						many = []float64{one}
					} else {
						json.Unmarshal(doc[m.Name], &many)
					}
					e.Values[m.Name] = many
				}
				res = append(res, e)
			}
		}
	}
	return res
}
