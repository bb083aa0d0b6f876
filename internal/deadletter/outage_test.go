package deadletter_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"integration-outbox/internal/app"
	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/testenv"
)

// world is the real composition (internal/app) on a fresh database and a
// moto command queue whose RedrivePolicy moves a message to its
// dead-letter queue after one receive, as the deployed queue does after
// maxReceiveCount failed deliveries.
type world struct {
	f     *testenv.Fixture
	app   *app.App
	out   *testenv.Buffer
	sqs   *sqs.Client
	queue string
	dlq   string
}

func newWorld(t *testing.T, env map[string]string) *world {
	t.Helper()
	ctx := context.Background()
	f := pg.NewDB(t)
	sq := sqs.NewFromConfig(moto.AWSConfig())
	dlq := testenv.CreateQueue(t, sq, nil)
	attrs, err := sq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &dlq,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	queue := testenv.CreateQueue(t, sq, map[string]string{"VisibilityTimeout": "0", "RedrivePolicy": fmt.Sprintf(
		`{"deadLetterTargetArn":%q,"maxReceiveCount":"1"}`, attrs.Attributes[string(types.QueueAttributeNameQueueArn)])})
	base := map[string]string{
		"DATABASE_URL": f.URL, "PUSH_PURCHASE_ORDER_QUEUE_URL": queue, "AWS_REGION": "us-east-1",
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_ENDPOINT_URL": moto.URL,
		"SANDBOX_PROVIDER_ENABLED": "true", "LOG_LEVEL": "info",
	}
	for k, v := range env {
		base[k] = v
	}
	out := &testenv.Buffer{}
	a, err := app.New(ctx, func(k string) string { return base[k] }, out, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return &world{f: f, app: a, out: out, sqs: sq, queue: queue, dlq: dlq}
}

// dispatch runs one dispatch invocation (no deadline: it does not wait for
// room) and returns its summary.
func (w *world) dispatch(t *testing.T) dispatch.Summary {
	t.Helper()
	d, err := w.app.Dispatcher(w.app.SQS())
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.Run(context.Background(), dispatch.Request{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// pushFunctionDown plays the push function's outage: the event source
// receives every message of the command queue and the invocation fails,
// so nothing deletes them; the next receive finds them past
// maxReceiveCount and SQS moves them to the dead-letter queue. It returns
// how many messages it failed on. (The queue's VisibilityTimeout is 0: a
// failed message is visible again at once.)
func (w *world) pushFunctionDown(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	failed := 0
	for range 20 {
		out, err := w.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &w.queue,
			MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			return failed
		}
		failed += len(out.Messages)
	}
	t.Fatal("the command queue never emptied into its dead-letter queue")
	return 0
}

// deadLetters receives every message of the dead-letter queue as one SQS
// event, without deleting them (the test decides what is acknowledged).
func (w *world) deadLetters(t *testing.T) (events.SQSEvent, []string) {
	t.Helper()
	var (
		ev      events.SQSEvent
		handles []string
	)
	for {
		out, err := w.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &w.dlq,
			MaxNumberOfMessages: 10, VisibilityTimeout: 60})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			return ev, handles
		}
		for _, m := range out.Messages {
			ev.Records = append(ev.Records, events.SQSMessage{MessageId: aws.ToString(m.MessageId), Body: aws.ToString(m.Body),
				EventSource: "aws:sqs"})
			handles = append(handles, aws.ToString(m.ReceiptHandle))
		}
	}
}

// release runs the dead-letter consumer on ev and fails the test on a
// function error or a reported failure.
func (w *world) release(t *testing.T, ev events.SQSEvent) {
	t.Helper()
	r, err := w.app.DeadLetterReleaser()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := r.Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("release: %v, failures %v", err, resp.BatchItemFailures)
	}
}

// rows renders every outbox row, attempt and conflict, for before/after
// comparisons.
func (w *world) rows(t *testing.T) string {
	t.Helper()
	var doc string
	err := w.f.Pool.QueryRow(context.Background(), `select concat_ws(E'\n',
		(select string_agg(to_jsonb(o)::text, E'\n' order by id) from external_integration_outbox o),
		(select string_agg(to_jsonb(a)::text, E'\n' order by id) from external_integration_attempts a),
		(select string_agg(to_jsonb(c)::text, E'\n' order by id) from external_integration_conflicts c))`).Scan(&doc)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// An outage of the push function: every message of a dispatch run fails
// on all its deliveries and lands in the dead-letter queue while its row
// holds its lease. With DISPATCH_MAX_IN_FLIGHT full of those rows, no
// tenant gets anything delivered until LEASE_SECONDS runs out. The
// dead-letter consumer releases them (attempt kept, claim dropped), so the
// very next dispatch run claims them again at full rate; a repeated or a
// stale dead-letter message changes nothing.
func TestPushOutageReleasesRowsThroughTheDeadLetterQueue(t *testing.T) {
	const inFlight = 4
	w := newWorld(t, map[string]string{"DISPATCH_MAX_IN_FLIGHT": fmt.Sprint(inFlight), "CONNECTION_MAX_IN_FLIGHT": "3",
		"LEASE_SECONDS": "2400"})
	var ids []string
	for _, org := range []string{w.f.NewID(t), w.f.NewID(t)} {
		conn := w.f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "sandbox"})
		for range 3 {
			po := w.f.PurchaseOrder(t, org, "", 1)
			ids = append(ids, w.f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, EntityID: po}))
		}
	}

	// The outage: a run claims up to the cap, and every message dies.
	if s := w.dispatch(t); s.Claimed != inFlight || s.Dispatched != inFlight {
		t.Fatalf("first run: %+v, want %d claimed and dispatched", s, inFlight)
	}
	if n := w.pushFunctionDown(t); n != inFlight {
		t.Fatalf("the push function failed on %d messages, want %d", n, inFlight)
	}
	ev, handles := w.deadLetters(t)
	if len(ev.Records) != inFlight {
		t.Fatalf("%d messages in the dead-letter queue, want %d", len(ev.Records), inFlight)
	}
	held := map[string]int{}
	for _, id := range ids {
		if r := w.f.Row(t, id); r.Status == "processing" {
			held[id] = r.AttemptCount
		}
	}
	if len(held) != inFlight {
		t.Fatalf("%d rows held in processing, want %d", len(held), inFlight)
	}
	// Without a release, those rows fill the cap: nothing else is claimed.
	if s := w.dispatch(t); s.Claimed != 0 {
		t.Fatalf("a run during the outage claimed %d rows with the cap full", s.Claimed)
	}

	// The dead-letter consumer releases every row, keeping its attempt.
	w.release(t, ev)
	for id, attempts := range held {
		r := w.f.Row(t, id)
		if r.Status != "failed" || r.AttemptCount != attempts || r.ClaimToken != nil || r.LeaseExpiresAt != nil ||
			r.RetryInSeconds == nil || *r.RetryInSeconds > 0 || r.LastError == nil ||
			!strings.Contains(*r.LastError, "dead-letter queue") {
			t.Errorf("row %s after the release: %+v, want failed, due now, attempt %d kept, no claim", id, r, attempts)
		}
	}
	if n := w.f.Count(t, `select count(*) from external_integration_attempts
		where outcome = 'failed' and not provider_called and error_excerpt like '%dead-letter queue%'`); n != inFlight {
		t.Errorf("%d attempt-history rows of the release, want %d", n, inFlight)
	}
	// SQS delivers at least once: the same messages again change nothing.
	before := w.rows(t)
	w.release(t, ev)
	if after := w.rows(t); after != before {
		t.Errorf("a repeated dead-letter batch changed rows:\nbefore %s\nafter  %s", before, after)
	}

	// The next run claims the released rows again at once, up to the cap.
	s := w.dispatch(t)
	if s.Claimed != inFlight {
		t.Fatalf("the run after the release claimed %d, want %d (the cap freed)", s.Claimed, inFlight)
	}
	for id, attempts := range held {
		if r := w.f.Row(t, id); r.Status != "processing" || r.AttemptCount != attempts+1 {
			t.Errorf("row %s: %s, attempt %d; want claimed again as attempt %d", id, r.Status, r.AttemptCount, attempts+1)
		}
	}
	// The old messages' claims are stale now: they release nothing.
	before = w.rows(t)
	w.release(t, ev)
	if after := w.rows(t); after != before {
		t.Errorf("stale dead-letter messages changed rows:\nbefore %s\nafter  %s", before, after)
	}
	for _, h := range handles {
		if _, err := w.sqs.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &w.dlq, ReceiptHandle: &h}); err != nil {
			t.Fatal(err)
		}
	}

	// The push function is back: everything is delivered, cap by cap.
	worker, err := w.app.PushWorker()
	if err != nil {
		t.Fatal(err)
	}
	for run := 0; w.f.Count(t, `select count(*) from external_integration_outbox where status <> 'completed'`) > 0; run++ {
		if run > 3 {
			t.Fatalf("rows still undelivered after %d runs", run)
		}
		if run > 0 {
			w.dispatch(t)
		}
		for {
			out, err := w.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &w.queue, MaxNumberOfMessages: 10})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Messages) == 0 {
				break
			}
			var batch events.SQSEvent
			for _, m := range out.Messages {
				batch.Records = append(batch.Records, events.SQSMessage{MessageId: aws.ToString(m.MessageId), Body: aws.ToString(m.Body)})
				w.sqs.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &w.queue, ReceiptHandle: m.ReceiptHandle})
			}
			if resp, err := worker.Handle(context.Background(), batch); err != nil || len(resp.BatchItemFailures) > 0 {
				t.Fatalf("push: %v %v", err, resp.BatchItemFailures)
			}
		}
	}
	if n := w.f.Count(t, `select count(*) from external_integration_outbox where status = 'completed'`); n != len(ids) {
		t.Errorf("%d rows completed, want %d", n, len(ids))
	}
}
