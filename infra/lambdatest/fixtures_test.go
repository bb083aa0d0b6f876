package lambdatest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"integration-outbox/internal/testenv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The fixed ids the sample events name (functions/*/events/*.json): the
// fixtures below seed rows with exactly these ids.
const (
	orgA  = "11111111-1111-4111-8111-111111111111" // Acme: webhook connection, location scoped
	orgB  = "22222222-2222-4222-8222-222222222222" // Globex: sandbox connection
	locA  = "33333333-3333-4333-8333-333333333333"
	connA = "44444444-4444-4444-8444-444444444444"
	connB = "55555555-5555-4555-8555-555555555555"

	// push-purchase-order/events/sqs-batch.json
	po1         = "66666666-6666-4666-8666-666666666601"
	po2         = "66666666-6666-4666-8666-666666666602"
	pushRow1    = "77777777-7777-4777-8777-777777777701"
	pushRow2    = "77777777-7777-4777-8777-777777777702"
	pushClaim1  = "88888888-8888-4888-8888-888888888801"
	pushClaim2  = "88888888-8888-4888-8888-888888888802"
	supplierRef = "SUP-ACME-001"

	// rerun/events/*.json
	rerunDeadLetter = "99999999-9999-4999-8999-999999999901" // dead_letter, attempts used up, open conflict
	rerunFailed     = "99999999-9999-4999-8999-999999999902" // failed, retry scheduled
	rerunCompleted  = "99999999-9999-4999-8999-999999999903"
	rerunUncertain  = "99999999-9999-4999-8999-999999999904"
	rerunOtherOrg   = "99999999-9999-4999-8999-999999999910" // orgB's dead_letter row
)

// stack is one function's world: its own database and command queue.
type stack struct {
	DatabaseURL string
	Pool        *pgxpool.Pool
	QueueURL    string
}

func newStack(t *testing.T, name string) *stack {
	t.Helper()
	ctx := context.Background()
	url, err := pg.MigratedDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pool := testenv.OpenPool(t, url, func(cfg *pgxpool.Config) { cfg.MaxConns = 4 })
	return &stack{DatabaseURL: url, Pool: pool, QueueURL: createQueue(t, name)}
}

// reset empties every table and the queue: each event starts from the same seed.
func (s *stack) reset(t *testing.T) {
	t.Helper()
	s.exec(t, `truncate external_integration_outbox, external_integration_conflicts, external_integration_rerun_audit, external_integration_attempts,
		integration_connections, purchase_orders, purchase_order_lines`)
	s.drain(t)
}

func (s *stack) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := s.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%v\n%s", err, sql)
	}
}

func (s *stack) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := s.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%v\n%s", err, sql)
	}
	return n
}

// seedConnections: Acme's webhook connection (scoped to location A) and
// Globex's sandbox one.
func (s *stack) seedConnections(t *testing.T, acmeCredential, acmeURL string) {
	t.Helper()
	cfg, _ := json.Marshal(map[string]string{"url": acmeURL})
	s.exec(t, `insert into integration_connections (id, organization_id, location_id, provider, credential_reference, config_json)
		values ($1, $2, $3, 'webhook', $4, $5), ($6, $7, null, 'sandbox', null, '{}')`,
		connA, orgA, locA, acmeCredential, cfg, connB, orgB)
}

// dbState is the rows of the tables a function may write, each rendered
// as jsonb text, for before/after comparisons.
type dbState struct {
	Outbox         map[string]string // outbox id → row
	Conflicts      map[string]string // conflict id → row
	ConflictOutbox map[string]string // conflict id → its outbox id
	Audits         []string
}

func (s *stack) state(t *testing.T) dbState {
	t.Helper()
	ctx := context.Background()
	st := dbState{Outbox: map[string]string{}, Conflicts: map[string]string{}, ConflictOutbox: map[string]string{}}
	rows, err := s.Pool.Query(ctx, `select id::text, to_jsonb(o)::text from external_integration_outbox o`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, doc string
		if err := rows.Scan(&id, &doc); err != nil {
			t.Fatal(err)
		}
		st.Outbox[id] = doc
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows, err = s.Pool.Query(ctx, `select id::text, coalesce(outbox_id::text, ''), to_jsonb(c)::text from external_integration_conflicts c`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, outboxID, doc string
		if err := rows.Scan(&id, &outboxID, &doc); err != nil {
			t.Fatal(err)
		}
		st.Conflicts[id], st.ConflictOutbox[id] = doc, outboxID
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows, err = s.Pool.Query(ctx, `select to_jsonb(a)::text from external_integration_rerun_audit a order by id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var doc string
		if err := rows.Scan(&doc); err != nil {
			t.Fatal(err)
		}
		st.Audits = append(st.Audits, doc)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return st
}

// diffOutside lists the outbox rows and conflicts, other than those of the
// outbox ids in except, that differ between two states.
func diffOutside(before, after dbState, except []string) []string {
	var diffs []string
	skip := map[string]bool{}
	for _, id := range except {
		skip[id] = true
	}
	for _, id := range unionKeys(before.Outbox, after.Outbox) {
		if !skip[id] && before.Outbox[id] != after.Outbox[id] {
			diffs = append(diffs, fmt.Sprintf("outbox %s:\n  before %s\n  after  %s", id, before.Outbox[id], after.Outbox[id]))
		}
	}
	for _, id := range unionKeys(before.Conflicts, after.Conflicts) {
		owner := before.ConflictOutbox[id] + after.ConflictOutbox[id]
		if !skip[before.ConflictOutbox[id]] && !skip[after.ConflictOutbox[id]] && before.Conflicts[id] != after.Conflicts[id] {
			diffs = append(diffs, fmt.Sprintf("conflict %s (outbox %s):\n  before %s\n  after  %s", id, owner, before.Conflicts[id], after.Conflicts[id]))
		}
	}
	return diffs
}

func unionKeys(a, b map[string]string) []string {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	out := make([]string, 0, len(keys))
	for k := range keys {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// commandBody is the SQS message of one command (contract).
type commandBody struct {
	OutboxID       string `json:"outboxId"`
	OrganizationID string `json:"organizationId"`
	ConnectionID   string `json:"connectionId"`
	CommandType    string `json:"commandType"`
	ClaimToken     string `json:"claimToken"`
}

// drain receives and deletes every message in the queue and returns their
// bodies, decoded strictly.
func (s *stack) drain(t *testing.T) []commandBody {
	t.Helper()
	ctx := context.Background()
	var bodies []commandBody
	for empty := 0; empty < 2; {
		out, err := sqsc.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(s.QueueURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 0, VisibilityTimeout: 60,
		})
		if err != nil {
			t.Fatalf("receiving from the queue: %v", err)
		}
		if len(out.Messages) == 0 {
			empty++
			continue
		}
		for _, m := range out.Messages {
			var b commandBody
			dec := json.NewDecoder(bytes.NewReader([]byte(aws.ToString(m.Body))))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&b); err != nil {
				t.Errorf("message body %s: %v", aws.ToString(m.Body), err)
			}
			bodies = append(bodies, b)
			if _, err := sqsc.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(s.QueueURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatalf("deleting a message: %v", err)
			}
		}
	}
	sort.Slice(bodies, func(i, j int) bool { return bodies[i].OutboxID < bodies[j].OutboxID })
	return bodies
}

// checkMessagesMatchClaims asserts that every message names a row that is
// processing under exactly the message's claim token, with its organization
// and connection.
func (s *stack) checkMessagesMatchClaims(t *testing.T, msgs []commandBody) {
	t.Helper()
	seen := map[string]bool{}
	for _, m := range msgs {
		if seen[m.OutboxID] {
			t.Errorf("two messages for outbox row %s", m.OutboxID)
		}
		seen[m.OutboxID] = true
		n := s.count(t, `select count(*) from external_integration_outbox
			where id = $1 and organization_id = $2 and integration_connection_id = $3 and command_type = $4
			  and claim_token = $5 and status = 'processing' and lease_expires_at > now()`,
			m.OutboxID, m.OrganizationID, m.ConnectionID, m.CommandType, m.ClaimToken)
		if n != 1 {
			t.Errorf("message %+v does not match a row leased under its claim token", m)
		}
	}
}

// decodeStrict decodes a response into out, refusing unknown keys, and
// checks that every key in want is present.
func decodeStrict(t *testing.T, body []byte, out any, want ...string) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		t.Fatalf("response %s: %v", body, err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(body, &keys); err != nil {
		t.Fatalf("response %s: %v", body, err)
	}
	for _, k := range want {
		if _, ok := keys[k]; !ok {
			t.Errorf("response %s lacks %q", body, k)
		}
	}
}

func ts(s string) time.Time {
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return v
}
