package push_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/testenv"
)

// orderReceiver is a supplier's endpoint that answers 201 after a delay and
// notes, per purchase order, how many of its calls overlapped and in which
// order its commands (idempotency keys) arrived.
type orderReceiver struct {
	mu       sync.Mutex
	inFlight map[string]int
	most     map[string]int
	keys     map[string][]string // purchase order → keys, in arrival order
	firstAt  map[string]time.Time
}

func (o *orderReceiver) answer(delay time.Duration) testenv.Answer {
	return func(_ int, w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body struct {
			IdempotencyKey string `json:"idempotencyKey"`
			PurchaseOrder  struct {
				ID string `json:"id"`
			} `json:"purchaseOrder"`
		}
		json.Unmarshal(raw, &body)
		po := body.PurchaseOrder.ID
		o.mu.Lock()
		o.inFlight[po]++
		o.most[po] = max(o.most[po], o.inFlight[po])
		if !slices.Contains(o.keys[po], body.IdempotencyKey) {
			o.keys[po] = append(o.keys[po], body.IdempotencyKey)
		}
		if _, ok := o.firstAt[po]; !ok {
			o.firstAt[po] = time.Now()
		}
		o.mu.Unlock()
		time.Sleep(delay)
		o.mu.Lock()
		o.inFlight[po]--
		o.mu.Unlock()
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"id": "EXT-%s"}`, body.IdempotencyKey)
	}
}

// Four commands for one purchase order, through the real dispatcher, an SQS
// queue and two push workers (two containers) polling it: they reach the
// supplier one at a time, oldest first, while other orders flow
// meanwhile. On a connection with "ordered": false they go at once.
func TestOneOrdersCommandsReachTheSupplierOneAtATimeOldestFirst(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{true, false} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			rec := &orderReceiver{inFlight: map[string]int{}, most: map[string]int{}, keys: map[string][]string{},
				firstAt: map[string]time.Time{}}
			rc := testenv.NewReceiver(t, rec.answer(300*time.Millisecond))
			cfg := map[string]any{"url": rc.URL}
			if !ordered {
				cfg["ordered"] = false
			}
			conn := b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: b.org, Provider: "webhook", Config: cfg})
			order := b.f.PurchaseOrder(t, b.org, "", 2)
			base := time.Now().Add(-time.Minute)
			var want []string
			for i := range 4 {
				key := fmt.Sprintf("order-%d", i+1)
				want = append(want, key)
				b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: conn, Provider: "webhook",
					EntityID: order, IdempotencyKey: key, CreatedAt: base.Add(time.Duration(i) * time.Second)})
			}
			var others []string
			for i := range 2 {
				po := b.f.PurchaseOrder(t, b.org, "", 1)
				others = append(others, po)
				b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: conn, Provider: "webhook",
					EntityID: po, IdempotencyKey: fmt.Sprintf("other-%d", i), CreatedAt: base.Add(2 * time.Second)})
			}

			client := sqs.NewFromConfig(moto.AWSConfig())
			queue := testenv.CreateQueue(t, client, map[string]string{"VisibilityTimeout": "30"})
			d, err := dispatch.New(b.store, client, dispatch.Config{Routes: dispatch.Routes{"push_purchase_order": queue},
				MaxAttempts: 10, Lease: 15 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			// Two containers poll the queue, each handling what it receives
			// as one SQS event.
			var wg sync.WaitGroup
			for range 2 {
				wg.Go(func() { consume(ctx, t, b, client, queue) })
			}
			claimedFirst := 0
			for run := 0; ctx.Err() == nil; run++ {
				s, err := d.Run(ctx, dispatch.Request{})
				if err != nil {
					t.Fatal(err)
				}
				if run == 0 {
					claimedFirst = s.Claimed
				}
				if b.f.Count(t, `select count(*) from external_integration_outbox where status <> 'completed'`) == 0 {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			cancel()
			wg.Wait()
			if n := b.f.Count(t, `select count(*) from external_integration_outbox where status <> 'completed'`); n != 0 {
				t.Fatalf("%d commands not completed", n)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if !ordered {
				if claimedFirst != 6 {
					t.Errorf("opted out: the first dispatch claimed %d commands, want all 6 at once", claimedFirst)
				}
				return
			}
			if claimedFirst != 3 {
				t.Errorf("the first dispatch claimed %d commands, want the order's oldest and the two other orders", claimedFirst)
			}
			if rec.most[order] != 1 {
				t.Errorf("%d calls for one purchase order overlapped, want one at a time", rec.most[order])
			}
			if !slices.Equal(rec.keys[order], want) {
				t.Errorf("the order's commands arrived as %v, want %v (oldest first)", rec.keys[order], want)
			}
			// The other orders did not wait for the chain.
			for _, po := range others {
				if !rec.firstAt[po].Before(rec.firstAt[order].Add(time.Second)) {
					t.Errorf("order %s reached the supplier only after the chain", po)
				}
			}
		})
	}
}

// consume receives messages from queue until ctx ends and hands each
// receive to the worker as one SQS event, deleting what it handled.
func consume(ctx context.Context, t *testing.T, b bundle, client *sqs.Client, queue string) {
	for ctx.Err() == nil {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(queue),
			MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			if ctx.Err() == nil {
				t.Error(err)
			}
			return
		}
		if len(out.Messages) == 0 {
			continue
		}
		var ev events.SQSEvent
		for _, m := range out.Messages {
			ev.Records = append(ev.Records, events.SQSMessage{MessageId: aws.ToString(m.MessageId), Body: aws.ToString(m.Body)})
		}
		resp, err := b.worker.Handle(context.WithoutCancel(ctx), ev)
		if err != nil {
			t.Error(err)
			return
		}
		failed := map[string]bool{}
		for _, f := range resp.BatchItemFailures {
			failed[f.ItemIdentifier] = true
		}
		var done []types.DeleteMessageBatchRequestEntry
		for _, m := range out.Messages {
			if !failed[aws.ToString(m.MessageId)] {
				done = append(done, types.DeleteMessageBatchRequestEntry{Id: m.MessageId, ReceiptHandle: m.ReceiptHandle})
			}
		}
		if len(done) > 0 {
			if _, err := client.DeleteMessageBatch(context.WithoutCancel(ctx), &sqs.DeleteMessageBatchInput{
				QueueUrl: aws.String(queue), Entries: done}); err != nil {
				t.Error(err)
			}
		}
	}
}
