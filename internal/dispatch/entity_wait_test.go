package dispatch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/message"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

// pushAfter sends through SQS, then, as a push function would some time
// later, ends each sent row with end (a result recorded). It notes the order
// of the sends and how many rows of the entity were in flight at each.
type pushAfter struct {
	dispatch.Sender
	t     *testing.T
	f     *testenv.Fixture
	delay time.Duration
	end   string // the update that records the row's result; $1 is its id

	mu       sync.Mutex
	sent     []string
	inFlight []int
	pushes   sync.WaitGroup
}

func (p *pushAfter) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	out, err := p.Sender.SendMessageBatch(ctx, in, opts...)
	if err != nil {
		return out, err
	}
	for _, e := range in.Entries {
		m, err := message.Decode(*e.MessageBody)
		if err != nil {
			p.t.Error(err)
			continue
		}
		var n int
		if err := p.f.Pool.QueryRow(ctx, `select count(*) from external_integration_outbox o
			join external_integration_outbox x on x.integration_connection_id = o.integration_connection_id
			    and x.local_entity_id = o.local_entity_id
			where o.id = $1 and x.status = 'processing'`, m.OutboxID).Scan(&n); err != nil {
			p.t.Error(err)
		}
		p.mu.Lock()
		p.sent, p.inFlight = append(p.sent, m.OutboxID), append(p.inFlight, n)
		p.mu.Unlock()
		p.pushes.Add(1)
		go func() {
			defer p.pushes.Done()
			time.Sleep(p.delay)
			if _, err := p.f.Pool.Exec(context.Background(), p.end, m.OutboxID); err != nil {
				p.t.Error(err)
			}
		}()
	}
	return out, err
}

// runWithLog runs d over a 6 s budget (1 s kept in reserve, room waits of
// 20 ms: generous, so a loaded machine's slow claims and sends still fit)
// and returns the run's summary log line.
func runWithLog(t *testing.T, b bundle, sender dispatch.Sender) (dispatch.Summary, map[string]any) {
	t.Helper()
	var logs bytes.Buffer
	d, err := dispatch.New(outbox.NewStore(b.f.Pool), sender, dispatch.Config{
		Routes: dispatch.Routes{"push_purchase_order": b.queue}, MaxAttempts: 10, Lease: 15 * time.Minute,
		RoomWait: 20 * time.Millisecond, Reserve: time.Second,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	s, err := d.Run(ctx, dispatch.Request{})
	if err != nil {
		t.Fatal(err)
	}
	for line := range bytes.SplitSeq(bytes.TrimSpace(logs.Bytes()), []byte("\n")) {
		var doc map[string]any
		if err := json.Unmarshal(line, &doc); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if doc["msg"] == "dispatch run finished" {
			return s, doc
		}
	}
	t.Fatalf("no summary in the run's log:\n%s", logs.String())
	return s, nil
}

// A run that sends a command with commands of its entity waiting behind it
// waits for its result and sends the next one at once, one at a time and
// oldest first, instead of leaving them to the next scheduled run.
func TestRunSendsTheNextCommandOfAnEntityOnceTheOneItSentEnds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	entity := b.f.NewID(t)
	var ids []string
	for i := range 3 {
		ids = append(ids, b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn,
			EntityID: entity, CreatedAt: time.Now().Add(time.Duration(i-10) * time.Second)}))
	}
	p := &pushAfter{Sender: b.sqs, t: t, f: b.f, delay: 100 * time.Millisecond,
		end: `update external_integration_outbox set status = 'completed', completed_at = now(), lease_expires_at = null
			where id = $1`}
	s, log := runWithLog(t, b, p)
	p.pushes.Wait()
	if s.Dispatched != 3 || !slices.Equal(p.sent, ids) {
		t.Errorf("the run sent %v (%d), want all three oldest first %v", p.sent, s.Dispatched, ids)
	}
	if !slices.Equal(p.inFlight, []int{1, 1, 1}) {
		t.Errorf("rows of the entity in flight at each send: %v, want one at a time", p.inFlight)
	}
	if log["entityWaits"].(float64) == 0 || log["capWaits"].(float64) != 0 {
		t.Errorf("waits: entity %v, cap %v; want the run to have waited behind its own rows only", log["entityWaits"], log["capWaits"])
	}
}

// A sent command whose result is a retry later no longer keeps the run
// waiting: its followers stay held until the retry, and the run ends.
func TestRunStopsWaitingWhenTheCommandItSentIsToBeRetriedLater(t *testing.T) {
	t.Parallel()
	b := setup(t)
	entity := b.f.NewID(t)
	for i := range 2 {
		b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn,
			EntityID: entity, CreatedAt: time.Now().Add(time.Duration(i-10) * time.Second)})
	}
	p := &pushAfter{Sender: b.sqs, t: t, f: b.f, delay: 100 * time.Millisecond,
		end: `update external_integration_outbox set status = 'failed', next_attempt_at = now() + interval '1 hour',
			lease_expires_at = null where id = $1`}
	s, log := runWithLog(t, b, p)
	p.pushes.Wait()
	if s.Dispatched != 1 {
		t.Errorf("the run sent %d, want the first only (the second waits for its retry)", s.Dispatched)
	}
	// Waiting to its deadline would be about (6 s - 1 s reserve) / 20 ms =
	// 250 waits; the result came after 100 ms (about 5 waits). A slow
	// machine makes fewer waits, never more.
	if n := log["entityWaits"].(float64); n == 0 || n >= 50 {
		t.Errorf("the run waited %v times behind its command, want it to stop once that command's result is a retry", n)
	}
}
