package rerun_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"integration-outbox/internal/app"
	"integration-outbox/internal/appbase"
	"integration-outbox/internal/config"
	"integration-outbox/internal/testenv"
)

// TestRerunDispatchPushRoundTrip takes a dead-lettered row through the
// pipeline as production wires it (app.Rerunner and app.PushWorker on a
// real SQS queue in moto_server): the rerun requeues it with dispatchNow,
// the dispatch sends its message, and the push worker delivers it to a
// sandbox connection, ending completed.
func TestRerunDispatchPushRoundTrip(t *testing.T) {
	t.Parallel()
	m := startMoto(t)
	ctx := context.Background()
	f := newDB(t)
	client := sqs.NewFromConfig(m.AWSConfig())
	queue := testenv.CreateQueue(t, client, nil)
	env := map[string]string{"DATABASE_URL": f.URL, "PUSH_PURCHASE_ORDER_QUEUE_URL": queue, "AWS_REGION": "us-east-1",
		"SANDBOX_PROVIDER_ENABLED": "true"}
	cfg, err := config.Load(func(k string) string { return env[k] }, config.NeedQueue)
	if err != nil {
		t.Fatal(err)
	}
	a := &app.App{App: &appbase.App{Config: cfg, Logger: slog.New(slog.DiscardHandler), Pool: f.Pool, AWS: m.AWSConfig(), Out: io.Discard}}

	org := f.NewID(t)
	ids := f.PurchaseOrderCommand(t, testenv.PurchaseOrderCommandOpts{Lines: 2,
		Connection: testenv.ConnectionOpts{OrganizationID: org, Provider: "sandbox", Config: map[string]any{}},
		Command:    testenv.CommandOpts{Status: "dead_letter", AttemptCount: cfg.MaxAttempts}})
	id := ids.CommandID
	b := bundle{f: f, org: org, conn: ids.ConnectionID}
	b.exec(t, `update external_integration_outbox set last_error = 'attempts exhausted: 503' where id = $1`, id)
	conflict := b.conflict(t, org, id, "open")

	r, err := a.Rerunner(a.SQS())
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Handle(ctx, b.payload(t, map[string]any{"outboxIds": []string{id}, "resetAttempts": true,
		"dispatchNow": true, "reason": "supplier back online", "requestedBy": "ops@example.com"}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Dispatched != 1 || len(res.Requeued) != 1 || res.Requeued[0] != id {
		t.Fatalf("rerun result %+v", res)
	}

	got, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(queue),
		MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Messages) != 1 {
		t.Fatalf("%d messages on the queue, want 1", len(got.Messages))
	}
	ev := events.SQSEvent{}
	for _, msg := range got.Messages {
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: aws.ToString(msg.MessageId), Body: aws.ToString(msg.Body),
			EventSource: "aws:sqs", EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:push"})
	}
	w, err := a.PushWorker()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := w.Handle(ctx, ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("push: %+v %v", resp, err)
	}

	row := f.Row(t, id)
	if row.Status != "completed" || row.CompletedAt == nil || row.AttemptCount != 1 {
		t.Fatalf("row after the round trip: %+v", row)
	}
	if n := f.Count(t, `select count(*) from external_integration_conflicts
		where id = $1 and status = 'resolved' and resolution_reason = 'supplier back online'`, conflict); n != 1 {
		t.Fatal("the conflict was not resolved with the rerun's reason")
	}
	if n := f.Count(t, `select count(*) from external_integration_rerun_audit
		where organization_id = $1 and affected_ids = array[$2::uuid] and dispatch_now and requested_by = 'ops@example.com'`,
		org, id); n != 1 {
		t.Fatal("no audit row for the rerun")
	}
}
