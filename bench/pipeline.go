package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"integration-outbox/internal/credential"
)

// execer is a pool or a connection.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// tenant is one organization with one integration connection.
type tenant struct {
	OrganizationID string
	ConnectionID   string
}

// createTenants inserts n organizations with one connection each, of
// provider with config_json cfg. When secretPrefix is set, connection i
// names the secret secretPrefix+i, created in moto and tagged for its
// organization.
func createTenants(ctx context.Context, env *benchEnv, db *pgx.Conn, n int, provider, cfg, secretPrefix string) ([]tenant, error) {
	out := make([]tenant, n)
	for i := range out {
		ref := ""
		if secretPrefix != "" {
			ref = fmt.Sprintf("%s%d", secretPrefix, i)
		}
		err := db.QueryRow(ctx, `
			insert into integration_connections (organization_id, provider, credential_reference, config_json)
			values (gen_random_uuid(), $1, nullif($2, ''), $3::jsonb) returning organization_id::text, id::text`,
			provider, ref, cfg).Scan(&out[i].OrganizationID, &out[i].ConnectionID)
		if err != nil {
			return nil, fmt.Errorf("creating connection %d: %w", i, err)
		}
		if ref != "" {
			if err := env.createSecret(ctx, ref, out[i].OrganizationID); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// seedJobsSQL inserts $1 purchase orders of $4 lines each and one queued
// push_purchase_order row per order; order g belongs to tenant g mod the
// number of tenants, so consecutive rows (and so every SQS batch) go through
// different connections.
const seedJobsSQL = `
with t as (
    select org, conn, (n - 1)::int as n from unnest($2::uuid[], $3::uuid[]) with ordinality as t(org, conn, n)
), src as (
    select g, gen_random_uuid() as po_id, t.org, t.conn
    from generate_series(1, $1::int) g join t on t.n = g % cardinality($2::uuid[])
), po as (
    insert into purchase_orders (id, organization_id, order_number, status, currency_code)
    select po_id, org, 'PO-' || g, 'approved', 'EUR' from src
), lines as (
    insert into purchase_order_lines (purchase_order_id, stock_item_id, ordered_quantity, purchase_unit_code,
        normalized_unit_code, units_per_purchase_unit_snapshot, unit_price_minor_snapshot, created_at)
    select src.po_id, gen_random_uuid(), l, 'case', 'each', 12, 1999, now() + make_interval(secs => l)
    from src cross join generate_series(1, $4::int) l
)
insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
    local_entity_type, local_entity_id, payload_json, idempotency_key, status, created_at)
select org, conn, $5, 'push_purchase_order', 'purchase_order', po_id, '{"externalSupplierId": "SUP-1"}',
    'idem-' || po_id, 'queued', now() + g * interval '1 microsecond'
from src`

// seedJobs inserts n due jobs (each with a purchase order of lines lines)
// spread over tenants.
func seedJobs(ctx context.Context, db execer, tenants []tenant, provider string, n, lines int) error {
	orgs := make([]string, len(tenants))
	conns := make([]string, len(tenants))
	for i, t := range tenants {
		orgs[i], conns[i] = t.OrganizationID, t.ConnectionID
	}
	if _, err := db.Exec(ctx, seedJobsSQL, n, orgs, conns, lines, provider); err != nil {
		return fmt.Errorf("seeding %d jobs: %w", n, err)
	}
	return nil
}

// queueSender is the in-process stand-in for SQS: SendMessageBatch puts
// every entry on a channel the consumers read, and counts its calls (each an
// SQS request: the messages are far below 64 KiB).
type queueSender struct {
	msgs  chan events.SQSMessage
	calls atomic.Int64
	seq   atomic.Int64
	// batch is the most messages one take hands a consumer, as the SQS
	// event source's BatchSize (default 10).
	batch int
}

func newQueueSender(capacity int) *queueSender {
	return &queueSender{msgs: make(chan events.SQSMessage, capacity), batch: 10}
}

func (q *queueSender) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	q.calls.Add(1)
	out := &sqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		id := fmt.Sprintf("bench-message-%d", q.seq.Add(1))
		m := events.SQSMessage{MessageId: id, Body: aws.ToString(e.MessageBody), EventSource: "aws:sqs",
			EventSourceARN: "arn:aws:sqs:us-east-1:000000000000:push-purchase-order"}
		select {
		case q.msgs <- m:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		out.Successful = append(out.Successful, sqstypes.SendMessageBatchResultEntry{Id: e.Id, MessageId: aws.String(id)})
	}
	return out, nil
}

// take returns the next batch of up to 10 messages as the event source
// mapping would hand it over: it waits for the first message (until ctx is
// done or the queue is closed) and takes what else is waiting.
func (q *queueSender) take(ctx context.Context) (events.SQSEvent, bool) {
	var ev events.SQSEvent
	select {
	case m, ok := <-q.msgs:
		if !ok {
			return ev, false
		}
		ev.Records = append(ev.Records, m)
	case <-ctx.Done():
		return ev, false
	}
	for len(ev.Records) < q.batch {
		select {
		case m, ok := <-q.msgs:
			if !ok {
				return ev, true
			}
			ev.Records = append(ev.Records, m)
		default:
			return ev, true
		}
	}
	return ev, true
}

// countingSecrets counts the calls that reach Secrets Manager.
type countingSecrets struct {
	api            credential.SecretsAPI
	describe, gets atomic.Int64
}

func (c *countingSecrets) GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	c.gets.Add(1)
	return c.api.GetSecretValue(ctx, in, opts...)
}

func (c *countingSecrets) DescribeSecret(ctx context.Context, in *secretsmanager.DescribeSecretInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.DescribeSecretOutput, error) {
	c.describe.Add(1)
	return c.api.DescribeSecret(ctx, in, opts...)
}

// statement is one pg_stat_statements entry of the measured database.
type statement struct {
	Calls int64
	// ExecMs is the server's total execution time of those calls.
	ExecMs float64
	Query  string
}

// resetStatements clears pg_stat_statements (for the whole cluster; nothing
// else runs meanwhile).
func resetStatements(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, `create extension if not exists pg_stat_statements`); err != nil {
		return fmt.Errorf("creating pg_stat_statements: %w", err)
	}
	_, err := conn.Exec(ctx, `select pg_stat_statements_reset()`)
	return err
}

// countStatements lists the statements run on conn's database since the
// reset, leaving out the reset and this query.
func countStatements(ctx context.Context, conn *pgx.Conn) ([]statement, int64, error) {
	rows, err := conn.Query(ctx, `
		select s.calls, s.total_exec_time, regexp_replace(s.query, '\s+', ' ', 'g')
		from pg_stat_statements s join pg_database d on d.oid = s.dbid
		where d.datname = current_database() and s.query not ilike '%pg_stat_statements%'
		order by s.calls desc, s.query`)
	if err != nil {
		return nil, 0, err
	}
	stmts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[statement])
	if err != nil {
		return nil, 0, err
	}
	var total int64
	for _, s := range stmts {
		total += s.Calls
	}
	return stmts, total, nil
}

// completed counts the completed rows.
func completed(ctx context.Context, conn *pgx.Conn) (int, error) {
	var n int
	err := conn.QueryRow(ctx, `select count(*) from external_integration_outbox where status = 'completed'`).Scan(&n)
	return n, err
}

// timed runs f and returns how long it took.
func timed(f func() error) (time.Duration, error) {
	t := time.Now()
	err := f()
	return time.Since(t), err
}
