package dispatch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/message"
	"integration-outbox/internal/metrics"
	"integration-outbox/internal/metrics/metricstest"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

var (
	pg   *testenv.Postgres
	moto *testenv.Moto
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.WithPostgres(&pg), testenv.WithMoto(&moto))
}

type bundle struct {
	f     *testenv.Fixture
	sqs   *sqs.Client
	queue string
	org   string
	conn  string
	po    string
}

func setup(t *testing.T) bundle {
	t.Helper()
	return setupBench(t)
}

func (b bundle) dispatcher(t *testing.T, sender dispatch.Sender, batch int) *dispatch.Dispatcher {
	t.Helper()
	if sender == nil {
		sender = b.sqs
	}
	d, err := dispatch.New(outbox.NewStore(b.f.Pool), sender, dispatch.Config{
		Routes: dispatch.Routes{"push_purchase_order": b.queue}, BatchSize: batch, MaxPerRun: 5000,
		MaxAttempts: 10, Lease: 15 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (b bundle) commands(t *testing.T, n int, opts testenv.CommandOpts) []string {
	t.Helper()
	opts.OrganizationID = b.org
	opts.ConnectionID = b.conn
	var ids []string
	for range n {
		// Each command its own entity, so that per-entity order does not
		// hold any back (dispatch never loads the entity).
		opts.EntityID = b.f.NewID(t)
		ids = append(ids, b.f.Command(t, opts))
	}
	return ids
}

func (b bundle) receiveAll(t *testing.T) []message.Message {
	t.Helper()
	var out []message.Message
	for {
		resp, err := b.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(b.queue), MaxNumberOfMessages: 10, VisibilityTimeout: 300})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Messages) == 0 {
			return out
		}
		for _, m := range resp.Messages {
			msg, err := message.Decode(aws.ToString(m.Body))
			if err != nil {
				t.Fatalf("message body %s: %v", aws.ToString(m.Body), err)
			}
			out = append(out, msg)
		}
	}
}

func TestScheduledRunClaimsEverythingDueAndSendsOneMessageEach(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.commands(t, 23, testenv.CommandOpts{})
	unknown := b.commands(t, 2, testenv.CommandOpts{CommandType: "push_invoice"})
	s, err := b.dispatcher(t, nil, 5).Handle(context.Background(), json.RawMessage(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if s != (dispatch.Summary{Claimed: 25, Dispatched: 23, Unsupported: 2}) {
		t.Fatalf("summary %+v", s)
	}
	msgs := b.receiveAll(t)
	seen := map[string]bool{}
	for _, m := range msgs {
		r := b.f.Row(t, m.OutboxID)
		if m.OrganizationID != b.org || m.ConnectionID != b.conn || m.CommandType != "push_purchase_order" ||
			r.ClaimToken == nil || *r.ClaimToken != m.ClaimToken || r.Status != "processing" {
			t.Errorf("message %+v for row %+v", m, r)
		}
		seen[m.OutboxID] = true
	}
	if len(msgs) != 23 || len(seen) != 23 {
		t.Errorf("%d messages for %d rows, want 23 distinct", len(msgs), len(seen))
	}
	for _, id := range ids {
		if !seen[id] {
			t.Errorf("row %s not sent", id)
		}
	}
	for _, id := range unknown {
		if r := b.f.Row(t, id); r.Status != "unsupported" || r.LastError == nil {
			t.Errorf("unknown command row %+v", r)
		}
	}
}

func TestConsoleLimitAndOrganization(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.commands(t, 30, testenv.CommandOpts{})
	other := b.f.NewID(t)
	otherConn := b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: other})
	d := b.dispatcher(t, nil, 50)
	s, err := d.Handle(context.Background(), json.RawMessage(`{"limit": 7}`))
	if err != nil || s.Claimed != 7 || s.Dispatched != 7 {
		t.Fatalf("limit 7: %+v %v", s, err)
	}
	// (Created only now: organizations are interleaved, so the limit-7 run
	// would have taken it beside the first organization's rows.)
	b.f.Command(t, testenv.CommandOpts{OrganizationID: other, ConnectionID: otherConn, EntityID: b.po})
	s, err = d.Handle(context.Background(), json.RawMessage(fmt.Sprintf(`{"limit": 100, "organizationId": %q}`, other)))
	if err != nil || s.Claimed != 1 {
		t.Fatalf("tenant run: %+v %v", s, err)
	}
	if _, err := d.Handle(context.Background(), json.RawMessage(`{"limit": 0}`)); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("limit 0: %v", err)
	}
}

// partialSender forwards to real SQS but reports every other entry failed,
// the way SendMessageBatch reports per-entry failures.
type partialSender struct {
	real *sqs.Client
	all  bool
}

func (p partialSender) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, o ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	if p.all {
		return nil, fmt.Errorf("injected: SQS unreachable")
	}
	var keep []types.SendMessageBatchRequestEntry
	var failed []types.BatchResultErrorEntry
	for i, e := range in.Entries {
		if i%2 == 1 {
			failed = append(failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InternalError"), SenderFault: false})
		} else {
			keep = append(keep, e)
		}
	}
	out, err := p.real.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: in.QueueUrl, Entries: keep}, o...)
	if err != nil {
		return nil, err
	}
	out.Failed = append(out.Failed, failed...)
	return out, nil
}

func TestSendFailuresPutTheRowsBackAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.commands(t, 10, testenv.CommandOpts{})
	s, err := b.dispatcher(t, partialSender{real: b.sqs}, 50).Run(context.Background(), dispatch.Request{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Claimed != 10 || s.Dispatched != 5 || s.Released != 5 {
		t.Fatalf("partial failure summary %+v", s)
	}
	sent := map[string]bool{}
	for _, m := range b.receiveAll(t) {
		sent[m.OutboxID] = true
	}
	for _, id := range ids {
		r := b.f.Row(t, id)
		if sent[id] {
			if r.Status != "processing" {
				t.Errorf("sent row %s is %s", id, r.Status)
			}
			continue
		}
		if r.Status != "queued" || r.AttemptCount != 0 || r.LeaseExpiresAt != nil || r.ClaimToken != nil {
			t.Errorf("unsent row not put back: %+v", r)
		}
	}

	// Full failure: the run errors and every claimed row is back.
	b2 := setup(t)
	ids2 := b2.commands(t, 4, testenv.CommandOpts{})
	s, err = b2.dispatcher(t, partialSender{all: true}, 50).Run(context.Background(), dispatch.Request{})
	if err == nil || s.Released != 4 || s.Dispatched != 0 {
		t.Fatalf("full failure: %+v %v", s, err)
	}
	for _, id := range ids2 {
		if r := b2.f.Row(t, id); r.Status != "queued" || r.AttemptCount != 0 {
			t.Errorf("row after full failure: %+v", r)
		}
	}
	// A queue that does not exist is a real SQS error.
	b3 := setup(t)
	b3.commands(t, 2, testenv.CommandOpts{})
	b3.queue = b3.queue + "-missing"
	s, err = b3.dispatcher(t, nil, 50).Run(context.Background(), dispatch.Request{})
	if err == nil || s.Released != 2 {
		t.Fatalf("missing queue: %+v %v", s, err)
	}
}

func TestRunEmitsOneValidEMFLine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.commands(t, 3, testenv.CommandOpts{})
	b.commands(t, 1, testenv.CommandOpts{CommandType: "push_invoice"})
	var buf bytes.Buffer
	d, err := dispatch.New(outbox.NewStore(b.f.Pool), b.sqs, dispatch.Config{
		Routes: dispatch.Routes{"push_purchase_order": b.queue}, Metrics: metrics.NewEmitter(&buf, "dispatch")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Run(context.Background(), dispatch.Request{}); err != nil {
		t.Fatal(err)
	}
	line := bytes.TrimSpace(buf.Bytes())
	if err := metricstest.Validate(line); err != nil || bytes.Count(line, []byte("\n")) != 0 {
		t.Fatalf("EMF %s: %v", line, err)
	}
	var doc map[string]any
	json.Unmarshal(line, &doc)
	if doc["Function"] != "dispatch" || doc["Claimed"] != 4.0 || doc["Dispatched"] != 3.0 || doc["Unsupported"] != 1.0 || doc["Released"] != 0.0 {
		t.Errorf("EMF values %s", line)
	}
}

// A row without an integration connection can never be started (its message
// would be refused as malformed): it ends at once, configuration_invalid,
// without an attempt, and no message is sent for it.
func TestRowWithoutConnectionEndsAtOnceAsConfigurationInvalid(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	good := b.commands(t, 1, testenv.CommandOpts{})[0]
	orphan := b.commands(t, 1, testenv.CommandOpts{})[0]
	if _, err := b.f.Pool.Exec(ctx, `update external_integration_outbox set integration_connection_id = null where id = $1`, orphan); err != nil {
		t.Fatal(err)
	}
	d := b.dispatcher(t, nil, 10)
	s, err := d.Handle(ctx, json.RawMessage(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if s != (dispatch.Summary{Claimed: 2, Dispatched: 1}) {
		t.Fatalf("summary %+v, want 2 claimed, 1 dispatched", s)
	}
	msgs := b.receiveAll(t)
	if len(msgs) != 1 || msgs[0].OutboxID != good {
		t.Fatalf("messages %+v, want only the one of row %s", msgs, good)
	}
	r := b.f.Row(t, orphan)
	if r.Status != "dead_letter" || r.AttemptCount != 0 || r.LeaseExpiresAt != nil || r.LastError == nil ||
		!strings.Contains(*r.LastError, "integration_connection_id") {
		t.Fatalf("row without connection: %+v (last_error %v), want dead_letter, no attempt used", r, deref(r.LastError))
	}
	var ctype, severity, status string
	if err := b.f.Pool.QueryRow(ctx, `select conflict_type, severity, status from external_integration_conflicts
		where outbox_id = $1 and organization_id = $2`, orphan, b.org).Scan(&ctype, &severity, &status); err != nil {
		t.Fatalf("conflict of the row without connection: %v", err)
	}
	if ctype != "configuration_invalid" || severity != "high" || status != "open" {
		t.Errorf("conflict = %s/%s/%s, want configuration_invalid/high/open", ctype, severity, status)
	}
	again, err := d.Handle(ctx, json.RawMessage(`{}`))
	if err != nil || again != (dispatch.Summary{}) {
		t.Fatalf("second run = %+v, %v; want nothing claimed", again, err)
	}
	if n := b.f.Count(t, `select count(*) from external_integration_conflicts where outbox_id = $1`, orphan); n != 1 {
		t.Errorf("%d conflicts, want 1", n)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

func TestRunWaitsForRoomUnderTheInFlightCapAndNeverExceedsIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.commands(t, 12, testenv.CommandOpts{})
	d, err := dispatch.New(outbox.NewStore(b.f.Pool), b.sqs, dispatch.Config{
		Routes: dispatch.Routes{"push_purchase_order": b.queue}, BatchSize: 50, MaxPerRun: 5000,
		MaxAttempts: 10, Lease: 15 * time.Minute, MaxInFlight: 4, RoomWait: 20 * time.Millisecond,
		Reserve: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// A consumer that finishes whatever is leased, noting the most it saw.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan int)
	go func() {
		most := 0
		for ctx.Err() == nil {
			var n int
			if err := b.f.Pool.QueryRow(ctx, `with leased as (
					select id from external_integration_outbox where status = 'processing' and lease_expires_at > now()),
				done as (update external_integration_outbox set status = 'completed', completed_at = now(),
					lease_expires_at = null where id in (select id from leased))
				select count(*) from leased`).Scan(&n); err != nil {
				break
			}
			most = max(most, n)
			time.Sleep(30 * time.Millisecond)
		}
		done <- most
	}()
	s, err := d.Run(ctx, dispatch.Request{})
	cancel()
	most := <-done
	if err != nil {
		t.Fatal(err)
	}
	if s.Claimed != 12 || s.Dispatched != 12 {
		t.Errorf("run claimed %d, dispatched %d; want all 12, waiting for room under the cap", s.Claimed, s.Dispatched)
	}
	if most > 4 {
		t.Errorf("%d rows leased at once, above DISPATCH_MAX_IN_FLIGHT 4", most)
	}
}
