package rerun_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/rerun"
	"integration-outbox/internal/testenv"
)

// One Postgres cluster and one moto_server per test run, started by the
// first test that needs them, so that the payload tests and fuzzing run
// without servers.
var servers testenv.OnDemand

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.WithOnDemand(&servers))
}

func newDB(t *testing.T) *testenv.Fixture {
	t.Helper()
	return servers.Postgres(t).NewDB(t)
}

func startMoto(t *testing.T) *testenv.Moto {
	t.Helper()
	return servers.Moto(t)
}

const maxAttempts = 10

var quiet = slog.New(slog.DiscardHandler)

// bundle is what a database test needs: a fresh database with one
// organization, its connection and purchase order, and a rerunner whose
// dispatcher sends through a recording fake.
type bundle struct {
	f      *testenv.Fixture
	org    string
	conn   string
	po     string
	sender *recordingSender
	r      *rerun.Rerunner
}

func setup(t *testing.T) bundle {
	t.Helper()
	f := newDB(t)
	org := f.NewID(t)
	b := bundle{f: f, org: org, sender: &recordingSender{},
		conn: f.Connection(t, testenv.ConnectionOpts{OrganizationID: org}),
		po:   f.PurchaseOrder(t, org, "", 1)}
	d, err := dispatch.New(outbox.NewStore(f.Pool), b.sender, dispatch.Config{
		Routes: dispatch.Routes{"push_purchase_order": "https://sqs.test/push"}, MaxAttempts: maxAttempts, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if b.r, err = rerun.New(f.Pool, d, rerun.Config{MaxAttempts: maxAttempts, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	return b
}

// row inserts an outbox row of the bundle's organization; a row in
// processing, failed, uncertain or dead_letter also gets the claim and
// provider state such a row carries, and a last_error.
func (b bundle) row(t *testing.T, status string, attempts int) string {
	t.Helper()
	return b.rowAt(t, status, attempts, time.Time{})
}

func (b bundle) rowAt(t *testing.T, status string, attempts int, created time.Time) string {
	t.Helper()
	// Each row its own entity: per-entity order holds none behind another.
	id := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, EntityID: b.f.NewID(t),
		Status: status, AttemptCount: attempts, CreatedAt: created})
	switch status {
	case "processing", "failed", "uncertain", "dead_letter":
		b.exec(t, `update external_integration_outbox
			set claim_token = gen_random_uuid(), claimed_at = now() - interval '1 hour',
			    lease_expires_at = case when status = 'processing' then now() + interval '1 hour' end,
			    started_at = now() - interval '1 hour',
			    provider_status = case when status = 'uncertain' then 'uncertain' end,
			    provider_reference = case when status = 'uncertain' then 'ext-1' end,
			    next_attempt_at = case when status = 'failed' then now() + interval '1 hour' end,
			    last_error = 'provider said 503'
			where id = $1`, id)
	}
	return id
}

// conflict opens a conflict for an outbox row and returns its id.
func (b bundle) conflict(t *testing.T, org, outboxID, status string) string {
	t.Helper()
	var id string
	err := b.f.Pool.QueryRow(context.Background(), `
		insert into external_integration_conflicts (organization_id, integration_connection_id, conflict_type,
			severity, local_entity_type, summary, outbox_id, status)
		values ($1, $2, 'provider_rejected', 'high', 'purchase_order', 'rejected', $3, $4) returning id::text`,
		org, b.conn, outboxID, status).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (b bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := b.f.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

// checksum digests every row of the outbox, the conflicts and the audit.
func (b bundle) checksum(t *testing.T) string {
	t.Helper()
	var sum string
	err := b.f.Pool.QueryRow(context.Background(), `
		select md5(
		    coalesce((select string_agg(t::text, '|' order by t.id) from external_integration_outbox t), '') || '#' ||
		    coalesce((select string_agg(t::text, '|' order by t.id) from external_integration_conflicts t), '') || '#' ||
		    coalesce((select string_agg(t::text, '|' order by t.id) from external_integration_rerun_audit t), ''))`).Scan(&sum)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

func (b bundle) audits(t *testing.T) int {
	t.Helper()
	return b.f.Count(t, `select count(*) from external_integration_rerun_audit`)
}

// payload renders a rerun payload for the bundle's organization.
func (b bundle) payload(t *testing.T, fields map[string]any) json.RawMessage {
	t.Helper()
	doc := map[string]any{"organizationId": b.org, "reason": "provider fixed"}
	for k, v := range fields {
		doc[k] = v
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func (b bundle) handle(t *testing.T, fields map[string]any) rerun.Result {
	t.Helper()
	res, err := b.r.Handle(context.Background(), b.payload(t, fields))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// recordingSender is a dispatch.Sender that accepts every entry and keeps
// what it was given.
type recordingSender struct {
	mu     sync.Mutex
	inputs []*sqs.SendMessageBatchInput
}

func (s *recordingSender) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inputs = append(s.inputs, in)
	out := &sqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id,
			MessageId: aws.String(fmt.Sprintf("m-%s", aws.ToString(e.Id)))})
	}
	return out, nil
}

// sentIDs lists the entry ids (outbox ids) sent so far.
func (s *recordingSender) sentIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for _, in := range s.inputs {
		for _, e := range in.Entries {
			ids = append(ids, aws.ToString(e.Id))
		}
	}
	return ids
}
