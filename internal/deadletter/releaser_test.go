package deadletter_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/jackc/pgx/v5/pgxpool"

	"integration-outbox/internal/deadletter"
	"integration-outbox/internal/metrics"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

func body(t *testing.T, c outbox.Claim) string {
	t.Helper()
	b, err := json.Marshal(map[string]string{"outboxId": c.ID, "organizationId": c.OrganizationID,
		"connectionId": c.ConnectionID, "commandType": c.CommandType, "claimToken": c.ClaimToken})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Junk is acknowledged and counted, never retried; a readable message
// releases its row; every message received is counted, so the alarm on
// DeadLetterMessages fires whatever became of it.
func TestHandleAcknowledgesJunkAndCountsEveryMessage(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	org := f.NewID(t)
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	id := f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, EntityID: f.PurchaseOrder(t, org, "", 1)})
	store := outbox.NewStore(f.Pool)
	claims, err := store.Claim(context.Background(), outbox.ClaimParams{Limit: 1, MaxAttempts: 10, Lease: time.Hour})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %v %v", claims, err)
	}
	out := &testenv.Buffer{}
	r, err := deadletter.New(store, deadletter.Config{Metrics: metrics.NewEmitter(out, "release-dead-letters")})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := r.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "junk", Body: "not json"},
		{MessageId: "unknown-key", Body: `{"outboxId":"x"}`},
		{MessageId: "real", Body: body(t, claims[0])},
	}})
	if err != nil || resp.BatchItemFailures == nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle: %v, failures %v (want an empty, present list)", err, resp.BatchItemFailures)
	}
	if row := f.Row(t, id); row.Status != "failed" {
		t.Errorf("row %s after its dead-letter message: %s, want failed", id, row.Status)
	}
	var emf map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if strings.Contains(l, `"_aws"`) {
			if err := json.Unmarshal([]byte(l), &emf); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := map[string]float64{deadletter.MetricMessages: 3, deadletter.MetricMalformed: 2, deadletter.MetricReleased: 1,
		deadletter.MetricDeadLettered: 0, deadletter.MetricStale: 0}
	for k, v := range want {
		if emf[k] != v {
			t.Errorf("EMF %s = %v, want %v (line %v)", k, emf[k], v, emf)
		}
	}
}

// With the database out of reach, every readable record is reported as a
// failure (SQS delivers it again after the queue's visibility timeout);
// junk is still acknowledged.
func TestHandleReportsRecordsWhenTheDatabaseIsDown(t *testing.T) {
	t.Parallel()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig("postgres://nobody@127.0.0.1:" + strconv.Itoa(port) + "/none?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	r, err := deadletter.New(outbox.NewStore(pool), deadletter.Config{})
	if err != nil {
		t.Fatal(err)
	}
	msg := outbox.Claim{ID: "0b6e2c55-2b0c-4d8e-9a43-5f1f0c1d2e3f", OrganizationID: "11111111-1111-4111-8111-111111111111",
		ConnectionID: "22222222-2222-4222-8222-222222222222", CommandType: "push_purchase_order",
		ClaimToken: "33333333-3333-4333-8333-333333333333"}
	resp, err := r.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m1", Body: body(t, msg)}, {MessageId: "junk", Body: "{"},
	}})
	if err != nil {
		t.Fatalf("Handle returned a function error: %v", err)
	}
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "m1" {
		t.Errorf("failures %v, want only m1", resp.BatchItemFailures)
	}
}
