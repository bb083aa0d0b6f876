package faulttest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/testenv"
)

// TestSameMessageTwiceAtOnceAndAfterCompletion sends the commands through a
// real (moto) SQS queue and lets SQS deliver every message twice (visibility
// timeout 0); four invocations then handle both copies at once while the
// provider is still answering, and the copies come again after completion:
// each command reaches the provider exactly once.
func TestSameMessageTwiceAtOnceAndAfterCompletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	client := sqs.NewFromConfig(moto.AWSConfig())
	// A message comes back at once: SQS's at-least-once delivery, forced.
	queue := testenv.CreateQueue(t, client, map[string]string{"VisibilityTimeout": "0"})
	e.queueURL = queue
	org := e.f.NewID(t)
	// The provider takes 300ms, so the concurrent deliveries overlap.
	conn := e.f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Config: map[string]any{"latencyMs": 300}})
	const n = 7
	for range n {
		e.f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, EntityID: e.f.PurchaseOrder(t, org, "", 1)})
	}
	if s, err := e.dispatcher(t, client, 15*time.Minute, 50).Run(context.Background(), dispatch.Request{}); err != nil || s.Dispatched != n {
		t.Fatalf("dispatch: %+v %v", s, err)
	}

	// receiveAll receives every message once (each copy is a delivery of its
	// own, with its own receipt handle).
	receiveAll := func() []events.SQSMessage {
		seen := map[string]bool{}
		var out []events.SQSMessage
		for range 100 {
			resp, err := client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &queue,
				MaxNumberOfMessages: 10})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range resp.Messages {
				if id := aws.ToString(m.MessageId); !seen[id] {
					seen[id] = true
					out = append(out, events.SQSMessage{MessageId: id, ReceiptHandle: aws.ToString(m.ReceiptHandle),
						Body: aws.ToString(m.Body)})
				}
			}
			if len(out) == n {
				return out
			}
		}
		t.Fatalf("received %d of %d messages", len(out), n)
		return nil
	}
	both := append(receiveAll(), receiveAll()...) // SQS delivered each message twice
	handles := map[string]bool{}
	for _, m := range both {
		handles[m.ReceiptHandle] = true
	}
	if len(handles) != 2*n {
		t.Fatalf("%d distinct deliveries, want %d", len(handles), 2*n)
	}

	w := e.worker(t, workerOpts{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			resp, err := w.Handle(context.Background(), events.SQSEvent{Records: both})
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Errorf("concurrent duplicate delivery: %v %v", resp.BatchItemFailures, err)
			}
		})
	}
	wg.Wait()
	// And the same messages again after completion.
	if resp := e.handle(t, w, both); len(resp.BatchItemFailures) != 0 {
		t.Errorf("late duplicates reported as failures: %v", resp.BatchItemFailures)
	}

	all := checkEveryRow(t, e.f.Pool)
	for id, r := range all {
		if r.Status != "completed" || r.Attempts != 1 {
			t.Errorf("row %s: %s after %d attempts", id, r.Status, r.Attempts)
		}
		if c := e.sandbox.callsFor(r.Key); c != 1 {
			t.Errorf("row %s reached the provider %d times, want 1", id, c)
		}
	}
	if got := e.sandbox.total.Load(); got != n {
		t.Errorf("provider calls %d, want %d (deliveries: %d)", got, n, 5*len(both))
	}
}
