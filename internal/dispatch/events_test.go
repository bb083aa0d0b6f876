package dispatch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"

	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/event"
	"integration-outbox/internal/health"
	"integration-outbox/internal/metrics"
	"integration-outbox/internal/metrics/metricstest"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

type countingPublisher struct {
	calls int
	err   error
}

func (p *countingPublisher) PublishPending(context.Context) (event.Published, error) {
	p.calls++
	return event.Published{Sent: 7, Failed: 2}, p.err
}

// Each run publishes the pending events once, after its claims, even when
// publishing fails (the next run sends what is left, and the dispatch does
// not fail), and its EMF line counts the events and the connections held.
func TestRunPublishesEventsAndCountsHeldConnections(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.commands(t, 2, testenv.CommandOpts{})
	var buf bytes.Buffer
	pub := &countingPublisher{err: errors.New("PutEvents: throttled")}
	d, err := dispatch.New(outbox.NewStore(b.f.Pool), b.sqs, dispatch.Config{
		Routes: dispatch.Routes{"push_purchase_order": b.queue}, Metrics: metrics.NewEmitter(&buf, "dispatch"),
		Events: pub,
		ConnectionCounts: func(context.Context) (health.Counts, error) {
			return health.Counts{Disabled: 1, Unauthorized: 2, Failing: 3}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := d.Run(context.Background(), dispatch.Request{}); err != nil || s.Dispatched != 2 {
		t.Fatalf("run: %+v, %v", s, err)
	}
	if pub.calls != 1 {
		t.Fatalf("published %d times in one run, want once", pub.calls)
	}
	line := bytes.TrimSpace(buf.Bytes())
	if err := metricstest.Validate(line); err != nil {
		t.Fatalf("EMF %s: %v", line, err)
	}
	var doc map[string]any
	json.Unmarshal(line, &doc)
	for name, want := range map[string]float64{"EventsPublished": 7, "EventsFailed": 2, "ConnectionsDisabled": 1,
		"ConnectionsUnauthorized": 2, "ConnectionsFailing": 3} {
		if doc[name] != want {
			t.Errorf("%s = %v, want %v in %s", name, doc[name], want, line)
		}
	}
}
