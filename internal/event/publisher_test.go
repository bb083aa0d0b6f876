package event_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"integration-outbox/internal/event"
	"integration-outbox/internal/testenv"
)

var (
	pg   *testenv.Postgres
	moto *testenv.Moto
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.WithPostgres(&pg), testenv.WithMoto(&moto))
}

// flaky wraps the EventBridge client: while failing is set it fails a whole
// call without sending (whole), refuses the even entries and sends the
// others (partial), or sends everything and then loses the answer (lost).
type flaky struct {
	api     event.API
	mu      sync.Mutex
	mode    string
	calls   int
	maxSeen int
}

func (f *flaky) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, opts ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	f.mu.Lock()
	mode := f.mode
	f.calls++
	f.maxSeen = max(f.maxSeen, len(in.Entries))
	f.mu.Unlock()
	switch mode {
	case "whole":
		return nil, errors.New("connection reset by peer")
	case "partial":
		var send []types.PutEventsRequestEntry
		for i, e := range in.Entries {
			if i%2 == 1 {
				send = append(send, e)
			}
		}
		res, err := f.api.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: send}, opts...)
		if err != nil {
			return nil, err
		}
		out := &eventbridge.PutEventsOutput{}
		for i := range in.Entries {
			if i%2 == 1 {
				out.Entries = append(out.Entries, res.Entries[i/2])
				continue
			}
			out.FailedEntryCount++
			out.Entries = append(out.Entries, types.PutEventsResultEntry{
				ErrorCode: aws.String("ThrottlingException"), ErrorMessage: aws.String("Rate exceeded")})
		}
		return out, nil
	case "lost":
		if _, err := f.api.PutEvents(ctx, in, opts...); err != nil {
			return nil, err
		}
		return nil, errors.New("context deadline exceeded awaiting the answer")
	}
	return f.api.PutEvents(ctx, in, opts...)
}

func (f *flaky) set(mode string) {
	f.mu.Lock()
	f.mode = mode
	f.mu.Unlock()
}

// setup writes n pending events and returns the bus, the flaky client, a
// publisher through it and the database.
func setup(t *testing.T, n int) (*testenv.EventBus, *flaky, *event.Publisher, *testenv.Fixture) {
	t.Helper()
	f := pg.NewDB(t)
	org := f.NewID(t)
	for i := range n {
		if _, err := f.Pool.Exec(context.Background(), `insert into integration_outbox_events (id, detail_type, organization_id, detail, created_at)
			select x.id, 'Command Dead-Lettered', $1::uuid, jsonb_build_object('eventId', x.id, 'organizationId', $1::uuid, 'n', $2::int), now() + make_interval(secs => $2::int)
			from (select gen_random_uuid() as id) x`, org, i); err != nil {
			t.Fatal(err)
		}
	}
	bus := testenv.NewEventBus(t, moto, event.Source)
	fl := &flaky{api: bus.Client}
	pub, err := event.NewPublisher(f.Pool, fl, event.Config{BusName: bus.Name, RetryIn: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	return bus, fl, pub, f
}

// delivered drains the bus's queue and counts how many times each event
// arrived.
func delivered(t *testing.T, bus *testenv.EventBus) map[string]int {
	t.Helper()
	got := map[string]int{}
	for _, e := range bus.Drain(t) {
		if e.Source != event.Source || e.DetailType != event.CommandDeadLettered {
			t.Errorf("source %q detail-type %q", e.Source, e.DetailType)
		}
		got[string(e.Detail)]++
	}
	return got
}

// A PutEvents call that fails, or answers FailedEntryCount > 0, loses
// nothing: the refused entries, and only they, are sent by the next run,
// and each event arrives once. Calls carry at most ten entries.
func TestPublishFailuresLoseNothingAndSendOnlyTheFailedEntriesAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bus, fl, pub, f := setup(t, 25)

	fl.set("whole")
	if _, err := pub.PublishPending(ctx); err == nil {
		t.Fatal("a failed PutEvents reported no error")
	}
	if n := len(delivered(t, bus)); n != 0 {
		t.Fatalf("%d events arrived from a failed call", n)
	}

	fl.set("partial")
	p, err := pub.PublishPending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.Sent != 5 || p.Failed != 5 {
		t.Fatalf("partial run: %+v, want 5 sent and 5 refused: the run stops at the first refusal", p)
	}
	first := delivered(t, bus)

	fl.set("")
	for range 3 {
		if _, err := pub.PublishPending(ctx); err != nil {
			t.Fatal(err)
		}
	}
	second := delivered(t, bus)
	for detail := range second {
		if first[detail] > 0 {
			t.Errorf("sent again after it was accepted: %s", detail)
		}
		first[detail] += second[detail]
	}
	if len(first) != 25 {
		t.Fatalf("%d distinct events arrived, want 25", len(first))
	}
	for detail, n := range first {
		if n != 1 {
			t.Errorf("arrived %d times: %s", n, detail)
		}
	}
	if n := f.Count(t, `select count(*) from integration_outbox_events where published_at is null`); n != 0 {
		t.Errorf("%d events still pending", n)
	}
	if fl.maxSeen > 10 {
		t.Errorf("a call carried %d entries, PutEvents takes 10", fl.maxSeen)
	}
}

// An answer lost after EventBridge took the entries (a timeout) is the one
// case of a repeat: the next run sends them again with the same eventId,
// which consumers use to drop the repeat (at least once, as documented).
func TestALostAnswerRepeatsEventsWithTheSameEventID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bus, fl, pub, _ := setup(t, 3)
	fl.set("lost")
	if _, err := pub.PublishPending(ctx); err == nil {
		t.Fatal("a lost answer reported no error")
	}
	fl.set("")
	if _, err := pub.PublishPending(ctx); err != nil {
		t.Fatal(err)
	}
	got := delivered(t, bus)
	if len(got) != 3 {
		t.Fatalf("%d distinct events, want 3", len(got))
	}
	for detail, n := range got {
		if n != 2 {
			t.Errorf("arrived %d times, want twice (once per run), same detail and eventId: %s", n, detail)
		}
	}
}

// PublishPending takes at most MaxPerRun events per run, oldest first.
func TestPublishPendingIsBoundedPerRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := pg.NewDB(t)
	org := f.NewID(t)
	for i := range 15 {
		if _, err := f.Pool.Exec(ctx, `insert into integration_outbox_events (id, detail_type, organization_id, detail)
			values (gen_random_uuid(), 'Command Failing', $1, $2::jsonb)`, org, fmt.Sprintf(`{"n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	bus := testenv.NewEventBus(t, moto, event.Source)
	pub, err := event.NewPublisher(f.Pool, bus.Client, event.Config{BusName: bus.Name, MaxPerRun: 12})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := pub.PublishPending(ctx); err != nil || p.Sent != 12 {
		t.Fatalf("first run sent %+v (%v), want 12", p, err)
	}
	if p, err := pub.PublishPending(ctx); err != nil || p.Sent != 3 {
		t.Fatalf("second run sent %+v (%v), want the 3 left", p, err)
	}
	if n := len(bus.Drain(t)); n != 15 {
		t.Fatalf("%d events arrived, want 15", n)
	}
}

// Published events are deleted once older than Keep; pending ones never.
func TestPublishedEventsAreDeletedAfterKeep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := pg.NewDB(t)
	org := f.NewID(t)
	if _, err := f.Pool.Exec(ctx, `insert into integration_outbox_events (id, detail_type, organization_id, detail, created_at, published_at)
		values (gen_random_uuid(), 'Command Failing', $1, '{}', now() - interval '9 days', now() - interval '8 days'),
		       (gen_random_uuid(), 'Command Failing', $1, '{}', now() - interval '2 days', now() - interval '2 days'),
		       (gen_random_uuid(), 'Command Failing', $1, '{}', now() - interval '9 days', null)`, org); err != nil {
		t.Fatal(err)
	}
	bus := testenv.NewEventBus(t, moto, event.Source)
	pub, err := event.NewPublisher(f.Pool, bus.Client, event.Config{BusName: bus.Name})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := pub.PublishPending(ctx); err != nil || p.Sent != 1 {
		t.Fatalf("sent %+v (%v), want the pending one", p, err)
	}
	if n := f.Count(t, `select count(*) from integration_outbox_events`); n != 2 {
		t.Errorf("%d events left, want 2: the one published 8 days ago deleted", n)
	}
}
