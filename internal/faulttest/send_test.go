package faulttest

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/testenv"
)

// unconfirmingSender forwards only the first entry of each batch and
// reports nothing about the others: neither Successful nor Failed.
type unconfirmingSender struct{ next dispatch.Sender }

func (s unconfirmingSender) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, o ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	first := *in
	first.Entries = in.Entries[:1]
	return s.next.SendMessageBatch(ctx, &first, o...)
}

// hangingSender never answers; the invocation's context ends the call.
type hangingSender struct{}

func (hangingSender) SendMessageBatch(ctx context.Context, _ *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestSendsThatAreNotConfirmedPutTheRowsBack extends the dispatcher's own
// partial / full failure tests: entries SendMessageBatch reports neither as
// sent nor as failed, and a send cut off by the invocation's end, put their
// rows back at once (queued, attempt not consumed) rather than leaving them
// to their lease; the next run sends each exactly once.
func TestSendsThatAreNotConfirmedPutTheRowsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	org := e.f.NewID(t)
	conn := e.f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	for range 25 {
		e.f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, EntityID: e.f.PurchaseOrder(t, org, "", 1)})
	}

	s, err := e.dispatcher(t, unconfirmingSender{next: e.q}, 15*time.Minute, 50).Run(context.Background(), dispatch.Request{})
	if err != nil || s != (dispatch.Summary{Claimed: 25, Dispatched: 3, Released: 22}) {
		t.Fatalf("unconfirmed entries: %+v, %v; want {25 3 0 22}", s, err)
	}
	// The invocation ends (its context is cancelled) while the send hangs.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(300*time.Millisecond, cancel)
	s, err = e.dispatcher(t, hangingSender{}, 15*time.Minute, 50).Run(ctx, dispatch.Request{})
	if err == nil || s != (dispatch.Summary{Claimed: 22, Released: 22}) {
		t.Fatalf("send cut off: %+v, %v; want an error and {22 0 0 22}", s, err)
	}
	for id, r := range checkEveryRow(t, e.f.Pool) {
		if r.Status == "queued" && (r.Attempts != 0 || r.Leased) {
			t.Errorf("released row %s: %+v", id, r)
		}
	}

	if s := e.dispatch(t, 15*time.Minute); s.Claimed != 22 || s.Dispatched != 22 {
		t.Fatalf("next run: %+v", s)
	}
	e.drain(t, e.worker(t, workerOpts{}))
	perRow := map[string]int{}
	for _, m := range e.q.messages() {
		perRow[m.OutboxID]++
	}
	for id, r := range checkEveryRow(t, e.f.Pool) {
		if r.Status != "completed" || r.Attempts != 1 || perRow[id] != 1 || e.sandbox.callsFor(r.Key) != 1 {
			t.Errorf("row %s: %s after %d attempts, %d messages, %d provider calls; want completed, 1, 1, 1",
				id, r.Status, r.Attempts, perRow[id], e.sandbox.callsFor(r.Key))
		}
	}
}
