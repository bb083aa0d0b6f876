package dispatch_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

// A command type the deployment knows but has no queue for (an empty
// route: PUSH_SUPPLIER_QUEUE_URL unset) is held, not ended: its rows go back
// to queued, their attempt given back, due after HeldRecheck, their
// last_error naming the variable; the run does not claim them again. A
// type nobody knows still ends unsupported.
func TestACommandTypeWithoutItsQueueIsHeldNotEnded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orders := b.commands(t, 3, testenv.CommandOpts{})
	suppliers := b.commands(t, 2, testenv.CommandOpts{CommandType: "push_supplier", Payload: map[string]any{"name": "S"}})
	unknown := b.commands(t, 1, testenv.CommandOpts{CommandType: "push_invoice"})
	d, err := dispatch.New(outbox.NewStore(b.f.Pool), b.sqs, dispatch.Config{
		Routes:    dispatch.Routes{"push_purchase_order": b.queue, "push_supplier": ""},
		BatchSize: 50, MaxPerRun: 5000, MaxAttempts: 10, Lease: 15 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.Handle(context.Background(), json.RawMessage(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if s != (dispatch.Summary{Claimed: 6, Dispatched: 3, Unsupported: 1, Released: 2}) {
		t.Errorf("summary %+v", s)
	}
	if n := len(b.receiveAll(t)); n != len(orders) {
		t.Errorf("%d messages, want the %d orders'", n, len(orders))
	}
	for _, id := range suppliers {
		r := b.f.Row(t, id)
		if r.Status != "queued" || r.AttemptCount != 0 || r.RetryInSeconds == nil ||
			*r.RetryInSeconds < dispatch.HeldRecheck.Seconds()-60 || r.LastError == nil ||
			!strings.Contains(*r.LastError, "PUSH_SUPPLIER_QUEUE_URL is not set") {
			t.Errorf("held push_supplier row %+v (last_error %q)", r, deref(r.LastError))
		}
	}
	if r := b.f.Row(t, unknown[0]); r.Status != "unsupported" {
		t.Errorf("unknown command type row %+v", r)
	}
}
