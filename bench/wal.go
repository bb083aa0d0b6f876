package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/migrate"
	"integration-outbox/internal/testenv"
	"integration-outbox/migrations"
)

// targetWALPerInsert bounds the WAL a host insert of a queued command writes
// with our objects installed, over the host-only database's.
const targetWALPerInsert = 1.25

// targetEnqueue bounds a call of integration_outbox_enqueue over the host's
// plain insert of the same row, on the same database: the server's CPU per
// call and the WAL per insert.
const targetEnqueue = 1.15

// walSchema is one database the host's inserts are measured on: the host's
// tables alone, or with our migrations applied up to Version.
type walSchema struct {
	Name    string
	Version int64 // 0: the host's tables only; -1: every migration
	// Lever, when set, changes the migrated database before the
	// measurement (a lever, e.g. keyIndexBody); its enqueue's CPU per call is
	// measured as every migration's is.
	Lever func(ctx context.Context, url string) error
}

// walKeyIndex is the key index lever's schema (-wal-key-index): every
// migration, then the enqueue keeping its keys in the key index as before
// migration 25 (keyIndexBody).
var walKeyIndex = walSchema{Name: "ours, the key index as before migration 25 (a lever)", Version: -1, Lever: keyIndexBody}

// walSchemas are measured side by side: the host alone, our index set before
// migration 8, before migration 10 (from which the host's own inserts skip
// the legacy key index), before migration 11 (from which they skip the
// per-entity order's index too, and write a narrower entry into the claim's
// walk index), and every migration. The calls "through
// integration_outbox_enqueue" run the same function on each: its one
// definition, which migrations 2, 6, 9 and 12 all apply (results from before
// that ran the body each version had then).
var walSchemas = []walSchema{
	{Name: "host only"},
	{Name: "ours up to migration 7", Version: 7},
	{Name: "ours up to migration 9", Version: 9},
	{Name: "ours up to migration 10", Version: 10},
	{Name: everyMigration, Version: -1},
}

// everyMigration names the schema with every migration applied.
const everyMigration = "ours, every migration"

// walRun is one schema's measurement.
type walRun struct {
	Schema  string
	Version int64
	Payload string // its name in walPayloads
	Rows    int
	Indexes int // indexes on the outbox
	// Host and Enqueue are N inserts of a queued command: the host's own
	// INSERT, and integration_outbox_enqueue (absent on the host-only
	// database).
	Host, Enqueue walBatch
	CPU           walCPU // on the schema with every migration, the one reported
}

type walBatch struct {
	Inserts int
	WAL     int64 // bytes, pg_current_wal_lsn() after - before
	Took    time.Duration
}

// walCPU is the server's CPU time of the host's inserts and of the enqueue
// calls, taken in alternating rounds on one session: the time its backend
// process spent on a CPU (/proc/<pid>/schedstat), every call's parse, plan,
// execution and commit. Keyed is the host's insert made idempotent the
// way the enqueue's row is (keyedInsertSQL): what the key's uniqueness
// alone costs, without the enqueue's call, checks and connection look-up.
// Unprobed is the enqueue without the probe of the host's keyed rows from
// before migration 10 (unprobedEnqueueSQL), which the bench's outbox holds.
type walCPU struct {
	Calls                          int // of each
	Host, Keyed, Unprobed, Enqueue time.Duration
}

// perCall is d per call, in milliseconds.
func (c walCPU) perCall(d time.Duration) float64 {
	return float64(d.Nanoseconds()) / 1e6 / float64(max(c.Calls, 1))
}

// cpuRounds and cpuRoundCalls: the rounds of walCPU, each cpuRoundCalls host
// inserts then as many enqueue calls.
const (
	cpuRounds     = 10
	cpuRoundCalls = 500
)

func (b walBatch) perInsert() float64 { return float64(b.WAL) / float64(max(b.Inserts, 1)) }
func (b walBatch) rate() float64      { return float64(b.Inserts) / max(b.Took.Seconds(), 1e-9) }

// measureWAL loads the same outbox into a database per schema and measures
// the WAL and the rate of n host inserts on each.
// walOptions say what measureWAL measures: the outbox sizes, the inserts
// per schema and the payload's name in walPayloads.
type walOptions struct {
	Sizes   []int
	Inserts int
	Payload string
	// KeyIndex adds the key index lever's schema (walKeyIndex).
	KeyIndex bool
}

func measureWAL(ctx context.Context, log *slog.Logger, env *benchEnv, o walOptions) (out []walRun, err error) {
	// The cluster runs without full-page writes (it is thrown away); a
	// host's database has them, and the first change of each page after a
	// checkpoint writes the whole page: the indexes an insert touches count
	// here too.
	restore, err := setFullPageWrites(ctx, env)
	if err != nil {
		return nil, err
	}
	defer func() {
		if rerr := restore(); rerr != nil && err == nil {
			err = rerr
		}
	}()
	schemas := walSchemas
	if o.KeyIndex {
		schemas = append(slices.Clip(schemas), walKeyIndex)
	}
	for _, rowCount := range o.Sizes {
		for _, s := range schemas {
			log.Info("measuring WAL per host insert", "schema", s.Name, "rows", rowCount, "inserts", o.Inserts, "payload", o.Payload)
			r, err := measureWALOnce(ctx, env, s, rowCount, o.Inserts, walPayloads[o.Payload])
			r.Payload = o.Payload
			if err != nil {
				return out, fmt.Errorf("%s, %d rows: %w", s.Name, rowCount, err)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// walLoadSQL fills the host's outbox: 1,000 organizations with one
// connection each, most rows completed, 1 in 20 queued, 1 in 50 failed, each
// with an idempotency key, created a second apart.
const (
	walConnectionsSQL = `
insert into integration_connections (id, organization_id, provider)
select ('00000000-0000-4000-9000-' || lpad(g::text, 12, '0'))::uuid,
    ('00000000-0000-4000-8000-' || lpad(g::text, 12, '0'))::uuid, 'webhook'
from generate_series(0, 999) g`
	walLoadSQL = `
insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
    local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count, next_attempt_at,
    completed_at, created_at)
select ('00000000-0000-4000-8000-' || lpad((g % 1000)::text, 12, '0'))::uuid,
    ('00000000-0000-4000-9000-' || lpad((g % 1000)::text, 12, '0'))::uuid, 'webhook',
    'push_purchase_order', 'purchase_order', gen_random_uuid(), $2::jsonb, 'po-' || g,
    case when g % 50 = 0 then 'failed' when g % 20 = 0 then 'queued' else 'completed' end,
    g % 3, now(), case when g % 20 <> 0 then now() end, now() - make_interval(secs => $1 - g)
from generate_series(1, $1) g`
)

// walPayloads are the payloads a host insert may carry (-wal-payload):
// what the push worker reads of a push_purchase_order command (it loads the
// order itself), and a whole purchase order, for a host that sends one.
var walPayloads = map[string]string{
	"supplier": `{"externalSupplierId": "SUP-1042"}`,
	"order": `{"purchaseOrderId": "7d1c2a8e-4b0f-4e55-9a57-0c7f3c1d2e11", "externalSupplierId": "SUP-1042",
    "orderNumber": "PO-2026-004211", "currency": "EUR", "lines": [{"sku": "FLOUR-25KG", "quantity": 4, "unitPriceMinor": 1899},
    {"sku": "SUGAR-10KG", "quantity": 2, "unitPriceMinor": 1250}, {"sku": "YEAST-500G", "quantity": 10, "unitPriceMinor": 349}]}`,
}

// hostInsertSQL is the back office's own insert of a queued command; $4 is
// its payload.
const hostInsertSQL = `
insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
    local_entity_type, local_entity_id, payload_json, idempotency_key, status, next_attempt_at)
values ($1, $2, 'webhook', 'push_purchase_order', 'purchase_order', gen_random_uuid(), $4::jsonb, $3, 'queued', now())`

// keyedInsertSQL is hostInsertSQL kept unique as integration_outbox_enqueue
// keeps its row: the key's id ($5, worked out by the host as
// integration_outbox_key_id does, keyID), and nothing inserted where it is
// taken. It is what the key's uniqueness alone costs the host's statement.
const keyedInsertSQL = `
insert into external_integration_outbox (id, organization_id, integration_connection_id, provider, command_type,
    local_entity_type, local_entity_id, payload_json, idempotency_key, status, next_attempt_at)
values ($5, $1, $2, 'webhook', 'push_purchase_order', 'purchase_order', gen_random_uuid(), $4::jsonb, $3, 'queued', now())
on conflict (id) do nothing`

// keyID is integration_outbox_key_id(organization, key) worked out by the
// host: the first 128 bits of SHA-256 over the organization's 16 bytes and
// the key, marked as a UUID of version 8 (migrations/enqueue).
func keyID(organization, key string) (string, error) {
	org, err := hex.DecodeString(strings.ReplaceAll(organization, "-", ""))
	if err != nil || len(org) != 16 {
		return "", fmt.Errorf("organization %q is not a UUID", organization)
	}
	sum := sha256.Sum256(append(org, key...))
	h := []byte(hex.EncodeToString(sum[:16]))
	h[12], h[16] = '8', '8'
	return fmt.Sprintf("%s-%s-%s-%s-%s", h[0:8], h[8:12], h[12:16], h[16:20], h[20:32]), nil
}

// unprobedSchema holds integration_outbox_enqueue as migration 26 applies
// it where no row of the host's from before migration 10 carries a key
// (EnqueueNames.HostKeys false), on the same tables.
const unprobedSchema = "bench_unprobed"

const unprobedEnqueueSQL = `select ` + unprobedSchema + `.integration_outbox_enqueue($1, $2, 'push_purchase_order', 'purchase_order',
    gen_random_uuid(), $4::jsonb, $3)`

// createUnprobedEnqueue creates unprobedSchema's enqueue on conn's
// database, whose host tables are public's.
func createUnprobedEnqueue(ctx context.Context, conn *pgx.Conn) error {
	fn, err := benchEnqueueSQL(unprobedSchema, false)
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, "create schema "+unprobedSchema+";\n"+fn)
	return err
}

const enqueueSQL = `select integration_outbox_enqueue($1, $2, 'push_purchase_order', 'purchase_order', gen_random_uuid(),
    $4::jsonb, $3)`

func measureWALOnce(ctx context.Context, env *benchEnv, s walSchema, rowCount, n int, payload string) (walRun, error) {
	res := walRun{Schema: s.Name, Rows: rowCount}
	url, err := env.pg.CreateDatabase(ctx, "")
	if err != nil {
		return res, err
	}
	defer env.dropDatabase(context.WithoutCancel(ctx), url)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return res, err
	}
	defer func() { conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, migrations.HostStandIn); err != nil {
		return res, fmt.Errorf("creating the host's tables: %w", err)
	}
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, stmt := range []string{`set local synchronous_commit = off`, walConnectionsSQL} {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, walLoadSQL, rowCount, payload)
		return err
	}); err != nil {
		return res, fmt.Errorf("loading: %w", err)
	}
	if s.Version != 0 {
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		if err := migrate.UpWith(ctx, url, migrate.Config{Log: quiet, Version: max(s.Version, 0)}); err != nil {
			return res, fmt.Errorf("migrating: %w", err)
		}
		if res.Version, err = migrate.CurrentVersion(ctx, url); err != nil {
			return res, err
		}
	}
	if s.Lever != nil {
		if err := s.Lever(ctx, url); err != nil {
			return res, fmt.Errorf("the lever: %w", err)
		}
	}
	if _, err := conn.Exec(ctx, `vacuum (analyze) external_integration_outbox`); err != nil {
		return res, err
	}
	if err := conn.QueryRow(ctx, `select count(*) from pg_index where indrelid = 'external_integration_outbox'::regclass`).Scan(&res.Indexes); err != nil {
		return res, err
	}
	// The enqueues go into a copy of the database as it is now, so that
	// their batch starts where the host's does: on the same table, not on
	// one grown by the host's batch (which put the enqueue's full-page
	// images at a larger outbox's, at 1k rows one of 6k).
	var enqueueURL string
	if s.Version != 0 {
		conn.Close(ctx)
		name := databaseName(url) + "_enqueue"
		if err := cloneDatabase(ctx, env, databaseName(url), name); err != nil {
			return res, fmt.Errorf("copying the database for the enqueues: %w", err)
		}
		enqueueURL = testenv.ReplaceDatabase(env.pg.URL, name)
		defer env.dropDatabase(context.WithoutCancel(ctx), enqueueURL)
		if conn, err = pgx.Connect(ctx, url); err != nil {
			return res, err
		}
	}
	if res.Host, err = walBatchOf(ctx, conn, hostInsertSQL, "host", n, payload); err != nil {
		return res, fmt.Errorf("host inserts: %w", err)
	}
	if s.Version != 0 {
		econn, err := pgx.Connect(ctx, enqueueURL)
		if err != nil {
			return res, err
		}
		res.Enqueue, err = walBatchOf(ctx, econn, enqueueSQL, "enqueue", n, payload)
		econn.Close(context.WithoutCancel(ctx))
		if err != nil {
			return res, fmt.Errorf("enqueues: %w", err)
		}
		if s.Name == everyMigration || s.Lever != nil {
			if res.CPU, err = walCPUOf(ctx, conn, payload); err != nil {
				return res, fmt.Errorf("server CPU of the inserts and enqueues: %w", err)
			}
		}
	}
	return res, nil
}

// walBatchOf runs n inserts of stmt, each its own transaction as a back
// office's request is, after a CHECKPOINT (so every schema's batch starts
// writing full-page images alike), and reads the WAL they wrote.
func walBatchOf(ctx context.Context, conn *pgx.Conn, stmt, keyPrefix string, n int, payload string) (walBatch, error) {
	b := walBatch{Inserts: n}
	if _, err := conn.Exec(ctx, `checkpoint`); err != nil {
		return b, err
	}
	var before string
	if err := conn.QueryRow(ctx, `select pg_current_wal_lsn()::text`).Scan(&before); err != nil {
		return b, err
	}
	began := time.Now()
	for i := range n {
		if err := walInsert(ctx, conn, stmt, false, i, fmt.Sprintf("%s-%d", keyPrefix, i), payload); err != nil {
			return b, err
		}
	}
	b.Took = time.Since(began)
	if err := conn.QueryRow(ctx, `select pg_current_wal_lsn() - $1::pg_lsn`, before).Scan(&b.WAL); err != nil {
		return b, err
	}
	return b, nil
}

// walInsert is the i-th insert of a batch: stmt, sent as node-postgres
// sends a parameterised query (an unnamed statement, planned per call), for
// the i-th organization of the load and its connection; withID adds the
// key's id as $5 (keyedInsertSQL).
func walInsert(ctx context.Context, conn *pgx.Conn, stmt string, withID bool, i int, key, payload string) error {
	org := fmt.Sprintf("00000000-0000-4000-8000-%012d", i%1000)
	connID := fmt.Sprintf("00000000-0000-4000-9000-%012d", i%1000)
	args := []any{pgx.QueryExecModeExec, org, connID, key, payload}
	if withID {
		id, err := keyID(org, key)
		if err != nil {
			return err
		}
		args = append(args, id)
	}
	_, err := conn.Exec(ctx, stmt, args...)
	return err
}

// walCPUOf measures walCPU on conn: cpuRounds rounds of cpuRoundCalls host
// inserts, then as many keyed inserts and as many enqueue calls, each call
// its own transaction.
func walCPUOf(ctx context.Context, conn *pgx.Conn, payload string) (walCPU, error) {
	c := walCPU{Calls: cpuRounds * cpuRoundCalls}
	var backend int
	if err := conn.QueryRow(ctx, `select pg_backend_pid()`).Scan(&backend); err != nil {
		return c, err
	}
	if err := createUnprobedEnqueue(ctx, conn); err != nil {
		return c, fmt.Errorf("creating the enqueue without the host keys' probe: %w", err)
	}
	for r := range cpuRounds {
		for _, k := range []struct {
			stmt, prefix string
			withID       bool
			into         *time.Duration
		}{{hostInsertSQL, "cpu-host", false, &c.Host}, {keyedInsertSQL, "cpu-keyed", true, &c.Keyed},
			{unprobedEnqueueSQL, "cpu-unprobed", false, &c.Unprobed}, {enqueueSQL, "cpu-enqueue", false, &c.Enqueue}} {
			before := procRunTime(backend)
			for i := range cpuRoundCalls {
				if err := walInsert(ctx, conn, k.stmt, k.withID, i, fmt.Sprintf("%s-%d-%d", k.prefix, r, i), payload); err != nil {
					return c, err
				}
			}
			after := procRunTime(backend)
			if before == 0 || after <= before {
				return c, fmt.Errorf("read no CPU time of the backend %d (/proc/%d/schedstat; is the server on this machine?)", backend, backend)
			}
			*k.into += after - before
		}
	}
	return c, nil
}

// walRows are the table's rows: each installed schema's WAL per host insert
// beside the host-only database's.
func walRows(runs []walRun) []tableRow {
	hosts := map[int]*walRun{} // by size
	for i := range runs {
		if runs[i].Version == 0 {
			hosts[runs[i].Rows] = &runs[i]
		}
	}
	var t []tableRow
	for _, r := range runs {
		host := hosts[r.Rows]
		if r.Version == 0 || host == nil {
			continue
		}
		ratio := r.Host.perInsert() / host.Host.perInsert()
		t = append(t, tableRow{"9", fmt.Sprintf("WAL per host insert of a queued command, %s-row outbox, %s (migration %d, %d indexes on the outbox)", rows(r.Rows), r.Schema, r.Version, r.Indexes),
			fmt.Sprintf("%.0f B per insert, %.0f inserts/s%s", r.Host.perInsert(), r.Host.rate(), enqueueText(r.Enqueue)),
			fmt.Sprintf("host only (%d indexes): %.0f B per insert, %.0f inserts/s", host.Indexes, host.Host.perInsert(), host.Host.rate()),
			fmt.Sprintf("%s; rate %s", x(ratio), x(r.Host.rate()/host.Host.rate())),
			fmt.Sprintf("≤ %.2f×", targetWALPerInsert), status(ratio <= targetWALPerInsert)})
	}
	for _, r := range runs {
		if r.CPU.Calls == 0 {
			continue
		}
		hostCPU, keyedCPU, unprobedCPU, enqueueCPU := r.CPU.perCall(r.CPU.Host), r.CPU.perCall(r.CPU.Keyed),
			r.CPU.perCall(r.CPU.Unprobed), r.CPU.perCall(r.CPU.Enqueue)
		cpu, wal := enqueueCPU/hostCPU, r.Enqueue.perInsert()/r.Host.perInsert()
		t = append(t, tableRow{"9", fmt.Sprintf("`integration_outbox_enqueue` against the host's plain insert of the same row, %s-row outbox, %s (migration %d): server CPU per call (parse, plan, execution, commit); WAL per insert", rows(r.Rows), r.Schema, r.Version),
			fmt.Sprintf("%.3f ms; %.0f B", enqueueCPU, r.Enqueue.perInsert()),
			fmt.Sprintf("plain insert: %.3f ms; %.0f B; the plain insert kept unique by the key's id (`on conflict (id) do nothing`): %.3f ms; the enqueue without the probe of the host's keys from before migration 10: %.3f ms",
				hostCPU, r.Host.perInsert(), keyedCPU, unprobedCPU),
			fmt.Sprintf("CPU %s (the keyed insert %s, the enqueue without the probe %s); WAL %s", x(cpu), x(keyedCPU/hostCPU), x(unprobedCPU/hostCPU), x(wal)),
			fmt.Sprintf("≤ %.2f× each", targetEnqueue), status(cpu <= targetEnqueue && wal <= targetEnqueue)})
	}
	return t
}

func enqueueText(b walBatch) string {
	if b.Inserts == 0 {
		return ""
	}
	return fmt.Sprintf(" (through `integration_outbox_enqueue`: %.0f B, %.0f/s)", b.perInsert(), b.rate())
}

func walMarkdown(runs []walRun) string {
	if len(runs) == 0 {
		return ""
	}
	var names, sizes []string
	for _, r := range runs {
		if !slices.Contains(names, r.Schema) {
			names = append(names, r.Schema)
		}
		if !slices.Contains(sizes, rows(r.Rows)) {
			sizes = append(sizes, rows(r.Rows))
		}
	}
	return fmt.Sprintf("9. **WAL per host insert.** One fresh database per schema (%s), each with the host's tables (`migrations/standin/host_schema.sql`) and the same outbox, bulk-loaded (`insert ... select generate_series`), at each size: %s rows over 1,000 organizations with a connection each, every row with an idempotency key, 1 in 20 `queued`, 1 in 50 `failed`, the rest `completed`; then the migrations (`migrate.UpWith`, stopping at the version named), `VACUUM (ANALYZE)`. On each, after a `CHECKPOINT`, %d inserts of a queued command one after the other, each its own transaction: the back office's own `INSERT` (an idempotency key, a connection, an entity, the payload %s), then, on the installed schemas, as many calls of `integration_outbox_enqueue`, on a copy of the database taken before the host's inserts (`create database ... template`), so that both batches start from the same table (before 2026-12-06 the calls ran after the host's inserts on the same database, on a table 5,000 rows larger). WAL = `pg_current_wal_lsn()` after − before, over the inserts, with `full_page_writes` on for the measurement (as on a host's database; the bench's cluster otherwise runs without): the full-page images count, each batch starting after a checkpoint. Every insert is sent as node-postgres sends a parameterised query (an unnamed statement, planned per call). The rate is inserts over the batch's wall time. Then, on the schema with every migration, the server's CPU per call: %d rounds of %d host inserts, then as many of the host's insert kept unique as the enqueue keeps its row (its id the key's, worked out by the host as `integration_outbox_key_id` does, and `on conflict (id) do nothing`: what the key's uniqueness alone costs the host's statement), then as many calls of `integration_outbox_enqueue` as migration 26 applies it where no row of the host's from before migration 10 carries a key (created in a schema of its own on the same tables: the call without its probe of the legacy key index), then as many calls of `integration_outbox_enqueue`, each its own transaction, on the same session; the CPU is the time its backend process spent on a CPU over each round's calls (`/proc/<pid>/schedstat`), which counts what `pg_stat_statements`' execution time leaves out of a plain insert (its parse and plan) and the commit of each. From migration 10 a row the host inserts itself reads `idempotency_enforced` NULL and enters neither key index (the bulk-loaded rows keep `false`); from migration 11 a queued row due at once (the host's insert sets `next_attempt_at` to `now()`, its `created_at`) enters no index of the per-entity order either: the host's insert writes one entry into an index of ours, `_walk_idx` (48-byte entries since migration 11).\n",
		strings.Join(names, "; "), strings.Join(sizes, " and "), runs[0].Host.Inserts,
		fmt.Sprintf("`%s` (%q)", strings.Join(strings.Fields(walPayloads[runs[0].Payload]), " "), runs[0].Payload),
		cpuRounds, cpuRoundCalls)
}

// setFullPageWrites restarts the cluster with full_page_writes on (a
// setting only a start or a reload changes, and the cluster's command line
// sets it off) and returns what restarts it as it was.
func setFullPageWrites(ctx context.Context, env *benchEnv) (restore func() error, err error) {
	var was string
	conn, err := pgx.Connect(ctx, env.pg.URL)
	if err != nil {
		return nil, err
	}
	err = conn.QueryRow(ctx, `show full_page_writes`).Scan(&was)
	conn.Close(ctx)
	if err != nil {
		return nil, err
	}
	if was == "on" {
		return func() error { return nil }, nil
	}
	before := env.pg.Settings
	env.pg.Settings = append(slices.Clone(before), "full_page_writes=on")
	if err := env.pg.Restart(); err != nil {
		return nil, fmt.Errorf("restarting PostgreSQL with full_page_writes on: %w", err)
	}
	env.postmaster = postmasterPID(env.pg.DataDir)
	return func() error {
		env.pg.Settings = before
		if err := env.pg.Restart(); err != nil {
			return fmt.Errorf("restarting PostgreSQL as it was: %w", err)
		}
		env.postmaster = postmasterPID(env.pg.DataDir)
		return nil
	}, nil
}
