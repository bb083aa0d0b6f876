package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"integration-outbox/internal/outbox"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/testenv"
	"integration-outbox/migrations"
)

// The churn run: producers enqueue at a steady rate, a claimer claims
// batches of claimLimit every churnClaimEvery, workers start and record
// what it claimed, autovacuum at its defaults, for a few minutes, on a
// mostly completed outbox. Ours and the legacy worker each get a database
// of the same rows.
const (
	churnOrgs       = 100
	churnClaimEvery = 250 * time.Millisecond
	churnSweepEvery = 4  // claims per dispatch run: the dead-letter sweep runs before the first
	churnGroup      = 10 // claimed rows per push invocation
	churnFakeCall   = 2 * time.Millisecond
	churnPoolSize   = 40
)

// Churn variants.
const (
	churnOurs   = "ours"
	churnLegacy = "legacy"
	// churnPlainInsert is a lever: ours, with the host inserting each
	// command itself with the legacy host's plain INSERT instead of calling
	// integration_outbox_enqueue (no idempotency, no connection check): what
	// our pipeline costs the server beside the legacy worker's when the
	// host's write is the same.
	churnPlainInsert = "ours, the host's plain insert (a lever)"
	// churnKeyIndex is a lever: ours, with the enqueue keeping its keys in
	// the outbox's unique key index as before migration 25 (keyIndexBody),
	// which every non-HOT update of an enqueued row (its claim, its record)
	// writes again: the build before, in the same run.
	churnKeyIndex = "ours, the key index as before migration 25 (a lever)"
	// churnRecordSQL is a lever: ours, with every batch recorded by
	// record.sql (outbox.Store.WithRecordSQLOnly), as before
	// record_completed.sql: the build before, in the same run.
	churnRecordSQL = "ours, every record through record.sql (a lever)"
)

// churnLevers are the churn's optional variants beside ours and the legacy
// worker, each run on its own copy of the size's rows.
type churnLevers struct {
	Fillfactor  int  // ours with the outbox's fillfactor set (0: not run)
	PlainInsert bool // ours with the host's plain INSERT (churnPlainInsert)
	KeyIndex    bool // ours with the key index as before migration 25 (churnKeyIndex)
	RecordSQL   bool // ours with every record through record.sql (churnRecordSQL)
}

// The legacy host and worker's statements on the churn (the legacy worker's
// claim is legacyClaimSQL): the host inserts the row itself; per claimed job
// the worker selects the purchase order, loads the connection and marks the
// row completed. Each is sent as node-postgres sends a parameterised query
// (an unnamed statement, planned per call).
const (
	legacyInsertSQL = `insert into external_integration_outbox (organization_id, integration_connection_id, provider,
    command_type, local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count, next_attempt_at)
values ($1::uuid, $2::uuid, 'sandbox', 'push_purchase_order', 'purchase_order', $3::uuid, $4::jsonb, $5, 'queued', 0, now())`
	legacyOrderSQL      = `select * from purchase_orders where id = $1::uuid and organization_id = $2::uuid`
	legacyConnectionSQL = `select * from integration_connections where id = $1::uuid and organization_id = $2::uuid`
	legacyCompleteSQL   = `update external_integration_outbox set status = 'completed', provider_reference = $2,
    provider_status = 'completed', last_error = null, completed_at = now(), updated_at = now() where id = $1::uuid`
	churnEnqueueSQL = `select integration_outbox_enqueue($1::uuid, $2::uuid, 'push_purchase_order', 'purchase_order',
    $3::uuid, $4::jsonb, $5)`
	churnPayload = `{"externalSupplierId": "SUP-1"}`
)

// statementFamily names what a pg_stat_statements entry belongs to.
type statementFamily struct {
	Name string
	// Match is a fragment of the statement's text.
	Match string
}

// churnFamilies classify the churn's top-level statements, first match wins;
// the rest (begin, commit, the bench's own reads) is "other". The fragments
// hold no constants: pg_stat_statements keeps texts with constants replaced
// by $n.
var churnFamilies = []statementFamily{
	// A statement run through its routine (internal/sqlroutine): the
	// routine's call is the top-level statement, its time the statement's.
	{"claim", "integration_outbox_sql_outbox_claim_"},
	{"sweep", "integration_outbox_sql_outbox_dead_letter_expired_"},
	{"start", "integration_outbox_sql_outbox_start_"},
	{"record (completed)", "integration_outbox_sql_outbox_record_completed_"},
	{"record", "integration_outbox_sql_outbox_record_"},
	{"purchase order", "integration_outbox_sql_purchaseorder_load_"},
	{"enqueue", "integration_outbox_enqueue("},
	{"claim", "pg_advisory_xact_lock(hashtext("},
	{"claim", "with recursive budget"},
	{"claim", "with budget as ("},
	{"claim", "delete from integration_outbox_connection_health"},
	{"sweep", "with exhausted as"},
	{"start", "started as ("},
	{"purchase order", "join purchase_orders p"},
	{"record", "with res as ("},
	{"legacy insert", "insert into external_integration_outbox (organization_id, integration_connection_id, provider,\n    command_type"},
	{"legacy claim", "for update of o skip locked"},
	{"legacy order", "select * from purchase_orders where"},
	{"legacy connection", "select * from integration_connections where"},
	{"legacy complete", "update external_integration_outbox set status = "},
}

// churnFamilyOrder is the order families are reported in.
var churnFamilyOrder = []string{"enqueue", "legacy insert", "sweep", "claim", "legacy claim", "start", "purchase order",
	"record", "record (completed)", "legacy order", "legacy connection", "legacy complete", "other"}

func familyOf(query string) string { return familyIn(churnFamilies, query) }

// familyIn names query's family in families (first match wins), or
// "other".
func familyIn(families []statementFamily, query string) string {
	for _, f := range families {
		if strings.Contains(query, f.Match) {
			return f.Name
		}
	}
	return "other"
}

// familyUse is what one family of statements cost the server.
type familyUse struct {
	Calls  int64
	ExecMs float64
	Rows   int64
}

// churnMinute is one bucket of a churn run.
type churnMinute struct {
	Enqueued, Claimed, Completed int
	Claims                       []time.Duration
	Postgres                     time.Duration
	// Autovacuum and Shared are the parts of Postgres its database's
	// autovacuum workers and the cluster's shared processes spent (the rest
	// is its backends').
	Autovacuum, Shared time.Duration
	Families           map[string]familyUse
	Versions           rowVersions
}

// rowVersions counts the outbox's row versions written
// (pg_stat_user_tables): inserts, updates, and the updates that were HOT
// (no index entry written).
type rowVersions struct {
	Inserted, Updated, HOT int64
}

func (v rowVersions) sub(w rowVersions) rowVersions {
	return rowVersions{v.Inserted - w.Inserted, v.Updated - w.Updated, v.HOT - w.HOT}
}

func (v rowVersions) add(w rowVersions) rowVersions {
	return rowVersions{v.Inserted + w.Inserted, v.Updated + w.Updated, v.HOT + w.HOT}
}

// perCompleted renders the row versions per completed command and the HOT
// share of the updates.
func (m churnMinute) versionsPerCompleted() string {
	if m.Completed == 0 {
		return ""
	}
	v := m.Versions
	hot := 0.0
	if v.Updated > 0 {
		hot = 100 * float64(v.HOT) / float64(v.Updated)
	}
	return fmt.Sprintf("%.2f (%.2f inserted, %.2f updated; %.0f%% of updates HOT)",
		float64(v.Inserted+v.Updated)/float64(m.Completed), float64(v.Inserted)/float64(m.Completed),
		float64(v.Updated)/float64(m.Completed), hot)
}

// readVersions reads the outbox's row version counters.
func readVersions(ctx context.Context, pool *pgxpool.Pool) (rowVersions, error) {
	var v rowVersions
	err := pool.QueryRow(ctx, `
		select n_tup_ins, n_tup_upd, n_tup_hot_upd from pg_stat_user_tables
		where relid = 'external_integration_outbox'::regclass`).Scan(&v.Inserted, &v.Updated, &v.HOT)
	if err != nil {
		return v, fmt.Errorf("reading the outbox's row versions: %w", err)
	}
	return v, nil
}

func (m churnMinute) cpuPerCompleted() time.Duration { return m.perCompleted(m.Postgres) }

// backends is what the variant's backends spent: Postgres without its
// autovacuum and the shared processes.
func (m churnMinute) backends() time.Duration { return m.Postgres - m.Autovacuum - m.Shared }

// perCompleted is d per completed command.
func (m churnMinute) perCompleted(d time.Duration) time.Duration {
	if m.Completed == 0 {
		return 0
	}
	return d / time.Duration(m.Completed)
}

// claimFamily is the family of the run's claim.
func claimFamily(variant string) string {
	if variant == churnLegacy {
		return "legacy claim"
	}
	return "claim"
}

// churnRun is one configuration's run.
type churnRun struct {
	Variant string
	Rows    int
	Rate    int
	Bucket  time.Duration
	// Autovacuum is the server's autovacuum setting during the run ("on"
	// but where -pg-setting turned it off).
	Autovacuum string
	LoadFor    time.Duration
	Minutes    []churnMinute
	// Backlog is the due rows left unclaimed at the end.
	Backlog int
	// Failures counts enqueues, claims and worker steps that failed.
	Failures int64
	// FirstFailure is the first of them.
	FirstFailure string
}

// steady merges the buckets after the first (warm-up) one.
func (r churnRun) steady() churnMinute {
	out := churnMinute{Families: map[string]familyUse{}}
	for i, m := range r.Minutes {
		if i == 0 && len(r.Minutes) > 1 {
			continue
		}
		out.Enqueued += m.Enqueued
		out.Claimed += m.Claimed
		out.Completed += m.Completed
		out.Claims = append(out.Claims, m.Claims...)
		out.Postgres += m.Postgres
		out.Autovacuum += m.Autovacuum
		out.Shared += m.Shared
		out.Versions = out.Versions.add(m.Versions)
		for k, v := range m.Families {
			f := out.Families[k]
			f.Calls += v.Calls
			f.ExecMs += v.ExecMs
			f.Rows += v.Rows
			out.Families[k] = f
		}
	}
	return out
}

// claimMsPerRow is the claim's server execution time per claimed row.
func (m churnMinute) claimMsPerRow(variant string) float64 {
	if m.Claimed == 0 {
		return 0
	}
	return m.Families[claimFamily(variant)].ExecMs / float64(m.Claimed)
}

// churnBucket is the width of a churn turn (a bucket of its run): 30
// seconds in a run of two minutes or more, a quarter of a shorter one.
func churnBucket(d time.Duration) time.Duration {
	if d >= 2*time.Minute {
		return churnTurn
	}
	return max(d/4, time.Second)
}

// churnTurn is the width of a churn turn in runs of two minutes or more.
const churnTurn = 30 * time.Second

// churnEvents collects a turn's events as they happen: the turn and the
// finishing of what it claimed.
type churnEvents struct {
	mu        sync.Mutex
	turn      churnMinute
	failures  atomic.Int64
	firstFail atomic.Value
}

func newChurnEvents() *churnEvents {
	return &churnEvents{turn: churnMinute{Families: map[string]familyUse{}}}
}

func (e *churnEvents) add(f func(m *churnMinute)) {
	e.mu.Lock()
	f(&e.turn)
	e.mu.Unlock()
}

func (e *churnEvents) fail(err error) {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return
	}
	if e.failures.Add(1) == 1 {
		e.firstFail.Store(err.Error())
	}
}

// prepareChurnDatabases loads a migrated database with rows completed outbox
// rows over churnOrgs organizations (one connection each) and orders
// purchase orders (the producers' entities), runs one ANALYZE, and clones it
// for the legacy worker with the legacy indexes and for each lever asked.
func prepareChurnDatabases(ctx context.Context, env *benchEnv, rows, orders int, levers churnLevers) (map[string]string, error) {
	ours, err := env.pg.MigratedDatabase(ctx)
	if err != nil {
		return nil, err
	}
	dbs := map[string]string{churnOurs: ours}
	conn, err := pgx.Connect(ctx, ours)
	if err != nil {
		return dbs, err
	}
	err = loadChurnOutbox(ctx, conn, rows, orders)
	conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return dbs, err
	}
	// clone copies ours for another variant, under churn_<rows>_<suffix>.
	clone := func(variant, suffix string) (string, error) {
		name := fmt.Sprintf("churn_%d_%s", rows, suffix)
		if err := cloneDatabase(ctx, env, databaseName(ours), name); err != nil {
			return "", fmt.Errorf("cloning the churn outbox for %s: %w", variant, err)
		}
		dbs[variant] = testenv.ReplaceDatabase(env.pg.URL, name)
		return dbs[variant], nil
	}
	legacy, err := clone(churnLegacy, "legacy")
	if err != nil {
		return dbs, err
	}
	if err := legacyIndexes(ctx, legacy, true); err != nil {
		return dbs, err
	}
	if levers.PlainInsert {
		if _, err := clone(churnPlainInsert, "plain_insert"); err != nil {
			return dbs, err
		}
	}
	if levers.KeyIndex {
		url, err := clone(churnKeyIndex, "key_index")
		if err != nil {
			return dbs, err
		}
		if err := keyIndexBody(ctx, url); err != nil {
			return dbs, fmt.Errorf("the key index lever: %w", err)
		}
	}
	if levers.RecordSQL {
		if _, err := clone(churnRecordSQL, "record_sql"); err != nil {
			return dbs, err
		}
	}
	if levers.Fillfactor == 0 {
		return dbs, nil
	}
	// The fillfactor lever: ours again, the outbox's new pages left with
	// room (a storage parameter of the host's table: only pages filled from
	// now on keep it).
	url, err := clone(churnFillfactor(levers.Fillfactor), "fillfactor")
	if err != nil {
		return dbs, err
	}
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return dbs, err
	}
	defer c.Close(context.WithoutCancel(ctx))
	_, err = c.Exec(ctx, fmt.Sprintf("alter table external_integration_outbox set (fillfactor = %d)", levers.Fillfactor))
	return dbs, err
}

// keyIndexBody makes the database at url the key index lever's: the
// enqueue function as migrations 2 to 22 apply it (its rows in the outbox's
// unique key index), in place of migration 25's.
func keyIndexBody(ctx context.Context, url string) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	fn, err := benchEnqueueSQL("public", true)
	if err != nil {
		return err
	}
	_, err = c.Exec(ctx, fn)
	return err
}

// benchEnqueueSQL is the enqueue functions (migrations.EnqueueSQL) created
// in schema on the bench's host tables (public's), keeping keys in the key
// index or by id alone, with no probe of a key index.
func benchEnqueueSQL(schema string, keyIndex bool) (string, error) {
	return migrations.EnqueueSQL(migrations.EnqueueNames{Outbox: "public.external_integration_outbox",
		Connections: "public.integration_connections", Schema: schema, KeyIndex: keyIndex})
}

// churnFillfactor names the fillfactor lever's variant: ours, with the
// outbox's fillfactor set to f.
func churnFillfactor(f int) string { return fmt.Sprintf("ours, fillfactor %d (a lever)", f) }

// cloneDatabase creates name as a copy of template, retrying while the
// template is "being accessed by other users" (the loader's backend may
// still be exiting).
func cloneDatabase(ctx context.Context, env *benchEnv, template, name string) error {
	return env.admin(ctx, func(c *pgx.Conn) error {
		stmt := fmt.Sprintf("create database %s template %s strategy file_copy",
			pgx.Identifier{name}.Sanitize(), pgx.Identifier{template}.Sanitize())
		var err error
		// The loader's backend may still be exiting.
		for range 50 {
			if _, err = c.Exec(ctx, stmt); err == nil || !strings.Contains(err.Error(), "being accessed") {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
		return err
	})
}

// loadChurnOutbox loads the churn's starting rows set-based: churnOrgs
// connections, rows completed outbox rows created a second apart up to now,
// orders purchase orders spread over the organizations; then ANALYZE.
// Autovacuum stays at its defaults.
func loadChurnOutbox(ctx context.Context, conn *pgx.Conn, rows, orders int) error {
	stmts := []struct {
		sql  string
		args []any
	}{
		{`insert into integration_connections (organization_id, provider, credential_reference, config_json)
		  select gen_random_uuid(), 'sandbox', 'integrations/churn/' || g, '{}' from generate_series(1, $1::int) g`, []any{churnOrgs}},
		{`with c as (select id, organization_id, (row_number() over (order by id) - 1)::int as n from integration_connections)
		  insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
		      local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count,
		      provider_reference, provider_status, completed_at, created_at, updated_at)
		  select c.organization_id, c.id, 'sandbox', 'push_purchase_order', 'purchase_order', gen_random_uuid(),
		      '{"externalSupplierId": "SUP-1"}', 'idem-' || g, 'completed', 1, 'ref-' || g, 'completed',
		      t.ts + interval '2 seconds', t.ts, t.ts
		  from generate_series(1, $1::int) g
		  cross join lateral (select now() - make_interval(secs => $1::int - g) as ts) t
		  join c on c.n = g % $2`, []any{rows, churnOrgs}},
		{`with c as (select organization_id, (row_number() over (order by id) - 1)::int as n from integration_connections)
		  insert into purchase_orders (organization_id, order_number, status, currency_code)
		  select c.organization_id, 'PO-' || g, 'approved', 'EUR'
		  from generate_series(0, $1::int - 1) g join c on c.n = g % $2`, []any{orders, churnOrgs}},
		{`analyze`, nil},
	}
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s.sql, s.args...); err != nil {
			return fmt.Errorf("loading the churn outbox of %d rows: %w", rows, err)
		}
	}
	return nil
}

// churnOrder is a purchase order a producer enqueues a command for.
type churnOrder struct{ id, org, conn string }

func churnOrders(ctx context.Context, db querier) ([]churnOrder, error) {
	rows, err := db.Query(ctx, `select p.id::text, p.organization_id::text, c.id::text
		from purchase_orders p join integration_connections c using (organization_id)
		order by p.order_number`)
	if err != nil {
		return nil, err
	}
	var out []churnOrder
	var o churnOrder
	_, err = pgx.ForEachRow(rows, []any{&o.id, &o.org, &o.conn}, func() error { out = append(out, o); return nil })
	if err != nil {
		return nil, fmt.Errorf("reading the purchase orders: %w", err)
	}
	// Interleave the organizations, so consecutive enqueues go to different ones.
	inter := make([]churnOrder, 0, len(out))
	per := map[string][]churnOrder{}
	var orgs []string
	for _, o := range out {
		if _, ok := per[o.org]; !ok {
			orgs = append(orgs, o.org)
		}
		per[o.org] = append(per[o.org], o)
	}
	for i := 0; len(inter) < len(out); i++ {
		for _, org := range orgs {
			if i < len(per[org]) {
				inter = append(inter, per[org][i])
			}
		}
	}
	return inter, nil
}

// measureChurn runs the churn at every size: ours, the legacy worker and
// each lever asked take turns in slices of width (churnBucket), each on its
// own copy of the size's rows and its own pool that stays open, until each
// has run for d; the order of the turns reverses every round (ours,
// legacy, legacy, ours, ...), so that a slow minute of the machine lands
// on each side alike.
func measureChurn(ctx context.Context, log *slog.Logger, env *benchEnv, sizes []int, rate int, d time.Duration, levers churnLevers) ([]churnRun, error) {
	var out []churnRun
	width := churnBucket(d)
	n := max(int(d/width), 1)
	for _, size := range sizes {
		t := time.Now()
		orders := rate*int((time.Duration(n)*width).Seconds())*5/4 + 1000
		dbs, err := prepareChurnDatabases(ctx, env, size, orders, levers)
		loadFor := time.Since(t)
		if err == nil {
			log.Info("churn outbox loaded", "rows", size, "took", loadFor.Round(time.Millisecond))
			names := []string{churnOurs, churnLegacy}
			if levers.PlainInsert {
				names = append(names, churnPlainInsert)
			}
			if levers.KeyIndex {
				names = append(names, churnKeyIndex)
			}
			if levers.RecordSQL {
				names = append(names, churnRecordSQL)
			}
			if levers.Fillfactor != 0 {
				names = append(names, churnFillfactor(levers.Fillfactor))
			}
			var runs []churnRun
			runs, err = runChurn(ctx, log, env, dbs, names, size, rate, width, n)
			for i := range runs {
				runs[i].LoadFor = loadFor
				st := runs[i].steady()
				log.Info("churn run", "variant", runs[i].Variant, "rows", size, "claimP50", percentile(st.Claims, 0.5),
					"cpuPerCompleted", st.cpuPerCompleted(), "completed", st.Completed, "backlog", runs[i].Backlog, "failures", runs[i].Failures)
			}
			out = append(out, runs...)
		}
		for _, url := range dbs {
			if derr := env.dropDatabase(context.WithoutCancel(ctx), url); derr != nil && err == nil {
				err = derr
			}
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// churnMeterEvery is how often the churn's dbMeter samples the cluster's
// processes.
const churnMeterEvery = 100 * time.Millisecond

// churnVariant is one variant's side of the churn: its pool, and what
// carries from one of its slices to the next (the keys enqueued so far, the
// claim's walk, the claims made), as it would in a process that runs on.
type churnVariant struct {
	name    string
	db      string // its database's name
	pool    *pgxpool.Pool
	orders  []churnOrder
	store   *outbox.Store
	command *purchaseorder.Command
	params  outbox.ClaimParams
	// enqueued and claims count the enqueues and claims of its slices so
	// far: the next enqueue's key, the sweep's turn.
	enqueued, claims int
	run              churnRun
	// carry is CPU its database's processes spent in the turns of
	// others before its first slice (its autovacuum), added to that slice
	// (as autovacuum: its pool is idle meanwhile).
	carry time.Duration
}

// runChurn runs the variants names, whose databases dbs holds, in turns of
// width until each has run n of them.
func runChurn(ctx context.Context, log *slog.Logger, env *benchEnv, dbs map[string]string, names []string, size, rate int, width time.Duration, n int) ([]churnRun, error) {
	vs := make([]*churnVariant, len(names))
	for i, name := range names {
		v, err := openChurnVariant(ctx, dbs[name], name)
		if err != nil {
			for _, o := range vs[:i] {
				o.pool.Close()
			}
			return nil, fmt.Errorf("%s, %d rows: %w", name, size, err)
		}
		defer v.pool.Close()
		v.run = churnRun{Variant: name, Rows: size, Rate: rate, Bucket: width}
		vs[i] = v
	}
	var autovacuum string
	if err := vs[0].pool.QueryRow(ctx, "show autovacuum").Scan(&autovacuum); err != nil {
		return nil, fmt.Errorf("reading the autovacuum setting: %w", err)
	}
	for _, v := range vs {
		v.run.Autovacuum = autovacuum
	}
	// pg_stat_statements: one reset for every database (the figures are
	// differences between the slices' ends).
	if _, err := vs[0].pool.Exec(ctx, "select pg_stat_statements_reset()"); err != nil {
		return nil, fmt.Errorf("resetting pg_stat_statements: %w", err)
	}
	meter := newDBMeter(env.postmaster)
	meterCtx, stopMeter := context.WithCancel(ctx)
	defer stopMeter()
	go meter.run(meterCtx, churnMeterEvery)
	for round := range n {
		order := slices.Clone(vs)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, v := range order {
			if err := v.slice(ctx, meter, vs, rate, width); err != nil {
				return nil, fmt.Errorf("%s, %d rows, turn %d: %w", v.name, size, round+1, err)
			}
			log.Debug("churn turn", "variant", v.name, "rows", size, "turn", round+1)
		}
	}
	out := make([]churnRun, len(vs))
	for i, v := range vs {
		if err := v.pool.QueryRow(ctx, `select count(*) from external_integration_outbox where status in ('queued', 'failed')`).Scan(&v.run.Backlog); err != nil {
			return nil, fmt.Errorf("%s: counting the backlog: %w", v.name, err)
		}
		out[i] = v.run
	}
	return out, nil
}

// openChurnVariant opens variant's pool on the database at url and reads
// its producers' orders.
func openChurnVariant(ctx context.Context, url, variant string) (*churnVariant, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = churnPoolSize
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	v := &churnVariant{name: variant, db: cfg.ConnConfig.Database, pool: pool,
		store: outbox.NewStore(pool).WithCircuit(outbox.Circuit{FailureThreshold: 5, Cooldown: time.Minute}),
		// One command for the run, as a push container holds one (its
		// catalog of routines is read once; before 2026-12-06 each group
		// made its own and read it again: one statement more per 10
		// commands).
		command: purchaseorder.NewCommand(pool),
		params: outbox.ClaimParams{Limit: claimLimit, MaxAttempts: 10, Lease: 900 * time.Second,
			MaxInFlight: 5000, ConnectionMaxInFlight: 10, After: "00000000-0000-0000-0000-000000000000"}}
	if variant == churnRecordSQL {
		v.store = v.store.WithRecordSQLOnly()
	}
	if v.orders, err = churnOrders(ctx, pool); err == nil {
		_, err = pool.Exec(ctx, "create extension if not exists pg_stat_statements")
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	return v, nil
}

// slice runs one turn of v for width: producers and claims until it ends,
// then its workers finish what was claimed. It appends the turn to v's run
// as one bucket: the cluster's CPU is what v's database's processes spent
// in it, with the cluster's shared processes (checkpointer, WAL writer...);
// what another variant's database spent meanwhile (its autovacuum) goes to
// that variant's latest bucket.
func (v *churnVariant) slice(ctx context.Context, meter *dbMeter, all []*churnVariant, rate int, width time.Duration) error {
	f0, r0, err := v.counters(ctx)
	if err != nil {
		return err
	}
	use0 := meter.totals()
	ev := newChurnEvents()
	runCtx, stop := context.WithTimeout(ctx, width)
	defer stop()
	var workers, loops sync.WaitGroup
	loops.Add(2)
	go func() { defer loops.Done(); v.produce(runCtx, rate, ev, &workers) }()
	go func() { defer loops.Done(); v.claimLoop(runCtx, ctx, ev, &workers) }()
	loops.Wait()
	workers.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	use1 := meter.totals()
	f1, r1, err := v.counters(ctx)
	if err != nil {
		return err
	}
	m := ev.turn
	av := autovacuumOf(v.db)
	m.Autovacuum = use1[av] - use0[av] + v.carry
	m.Shared = use1[""] - use0[""]
	m.Postgres = use1[v.db] - use0[v.db] + m.Autovacuum + m.Shared
	v.carry = 0
	m.Versions = r1.sub(r0)
	for k, u := range f1 {
		p := f0[k]
		m.Families[k] = familyUse{Calls: u.Calls - p.Calls, ExecMs: u.ExecMs - p.ExecMs, Rows: u.Rows - p.Rows}
	}
	v.run.Minutes = append(v.run.Minutes, m)
	for _, o := range all {
		if o == v {
			continue
		}
		// While it waits its pool is idle; its autovacuum may work.
		av := autovacuumOf(o.db)
		vacuumed := use1[av] - use0[av]
		spent := use1[o.db] - use0[o.db] + vacuumed
		if len(o.run.Minutes) == 0 {
			o.carry += spent
		} else {
			last := &o.run.Minutes[len(o.run.Minutes)-1]
			last.Postgres += spent
			last.Autovacuum += vacuumed
		}
	}
	v.run.Failures += ev.failures.Load()
	if f, ok := ev.firstFail.Load().(string); ok && v.run.FirstFailure == "" {
		v.run.FirstFailure = f
	}
	return nil
}

// counters reads v's database's statement totals by family and its
// outbox's row version counters.
func (v *churnVariant) counters(ctx context.Context) (map[string]familyUse, rowVersions, error) {
	f, err := readFamilies(ctx, v.pool, familyOf)
	if err != nil {
		return nil, rowVersions{}, err
	}
	r, err := readVersions(ctx, v.pool)
	return f, r, err
}

// querier is a pool or a connection.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// readFamilies sums pg_stat_statements' top-level entries of db's database
// by family, as classify names them.
func readFamilies(ctx context.Context, db querier, classify func(query string) string) (map[string]familyUse, error) {
	rows, err := db.Query(ctx, `select s.query, s.calls, s.total_exec_time, s.rows
		from pg_stat_statements s join pg_database d on d.oid = s.dbid
		where d.datname = current_database() and s.toplevel`)
	if err != nil {
		return nil, fmt.Errorf("reading pg_stat_statements: %w", err)
	}
	out := map[string]familyUse{}
	var (
		q     string
		u     familyUse
		calls int64
	)
	_, err = pgx.ForEachRow(rows, []any{&q, &calls, &u.ExecMs, &u.Rows}, func() error {
		name := classify(q)
		f := out[name]
		f.Calls += calls
		f.ExecMs += u.ExecMs
		f.Rows += u.Rows
		out[name] = f
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading pg_stat_statements: %w", err)
	}
	return out, nil
}

// produce enqueues at rate per second until ctx ends, each enqueue from its
// own goroutine (independent host requests), round-robin over the
// organizations' orders.
func (v *churnVariant) produce(ctx context.Context, rate int, ev *churnEvents, wg *sync.WaitGroup) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for ; ; v.enqueued++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		o := v.orders[v.enqueued%len(v.orders)]
		key := fmt.Sprintf("churn-%d", v.enqueued)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if v.name == churnLegacy || v.name == churnPlainInsert {
				_, err = v.pool.Exec(ctx, legacyInsertSQL, pgx.QueryExecModeExec, o.org, o.conn, o.id, churnPayload, key)
			} else {
				_, err = v.pool.Exec(ctx, churnEnqueueSQL, pgx.QueryExecModeExec, o.org, o.conn, o.id, churnPayload, key)
			}
			if err != nil {
				ev.fail(fmt.Errorf("enqueue: %w", err))
				return
			}
			ev.add(func(m *churnMinute) { m.Enqueued++ })
		}()
	}
}

// claimLoop claims every churnClaimEvery until runCtx ends and hands each
// batch to workers in groups of churnGroup; the workers run on ctx, so that
// what was claimed is finished.
func (v *churnVariant) claimLoop(runCtx, ctx context.Context, ev *churnEvents, wg *sync.WaitGroup) {
	tick := time.NewTicker(churnClaimEvery)
	defer tick.Stop()
	for ; ; v.claims++ {
		select {
		case <-runCtx.Done():
			return
		case <-tick.C:
		}
		var (
			claims []legacyJob
			batch  outbox.Batch
			err    error
			began  = time.Now()
			took   time.Duration
		)
		if v.name == churnLegacy {
			claims, err = legacyClaim(runCtx, v.pool)
			took = time.Since(began)
		} else {
			if v.claims%churnSweepEvery == 0 {
				if _, err := v.store.DeadLetterExpired(runCtx, v.params); err != nil {
					ev.fail(fmt.Errorf("sweep: %w", err))
				}
				began = time.Now()
			}
			batch, err = v.store.ClaimBatch(runCtx, v.params)
			took = time.Since(began)
			v.params.After = batch.NextAfter(v.params.After)
		}
		if err != nil {
			ev.fail(fmt.Errorf("claim: %w", err))
			continue
		}
		got := len(claims) + len(batch.Claims)
		ev.add(func(m *churnMinute) { m.Claims = append(m.Claims, took); m.Claimed += got })
		for lo := 0; lo < got; lo += churnGroup {
			hi := min(lo+churnGroup, got)
			wg.Add(1)
			if v.name == churnLegacy {
				go func() { defer wg.Done(); legacyWork(ctx, v.pool, claims[lo:hi], ev) }()
			} else {
				go func() { defer wg.Done(); ourWork(ctx, v.store, v.command, batch.Claims[lo:hi], ev) }()
			}
		}
	}
}

// ourWork is one push invocation: start the claims, load their purchase
// orders, a short fake provider call, record them completed.
func ourWork(ctx context.Context, store *outbox.Store, command *purchaseorder.Command, claims []outbox.Claim, ev *churnEvents) {
	reqs := make([]outbox.StartRequest, len(claims))
	for i, c := range claims {
		reqs[i] = outbox.StartRequest{OutboxID: c.ID, OrganizationID: c.OrganizationID, ConnectionID: c.ConnectionID,
			ClaimToken: c.ClaimToken, LeaseUntil: time.Now().Add(time.Minute)}
	}
	jobs, err := store.Start(ctx, reqs)
	if err != nil {
		ev.fail(err)
		return
	}
	if _, err := command.Load(ctx, jobs); err != nil {
		ev.fail(err)
		return
	}
	called := time.Now()
	time.Sleep(churnFakeCall)
	done := time.Now()
	rec, err := store.Record(ctx, churnOutcomes(jobs, called, done))
	if err != nil {
		ev.fail(err)
		return
	}
	ev.add(func(m *churnMinute) { m.Completed += len(rec.IDs) })
}

// churnOutcomes are jobs completed by a provider call from called to done,
// as the churn's workers record them.
func churnOutcomes(jobs []outbox.Job, called, done time.Time) []outbox.Outcome {
	outcomes := make([]outbox.Outcome, len(jobs))
	for i, j := range jobs {
		var loc string
		if j.Connection != nil {
			loc = j.Connection.LocationID
		}
		outcomes[i] = outbox.Outcome{OutboxID: j.ID, OrganizationID: j.OrganizationID, ConnectionID: j.ConnectionID,
			ClaimToken: j.ClaimToken, LocationID: loc, Status: outbox.StatusCompleted, ProviderReference: "ref-" + j.ID,
			ProviderStatus: "completed", CallStartedAt: called, CallFinishedAt: done, ProviderCalled: true,
			HTTPStatus: 201, Circuit: outbox.CircuitSuccess}
	}
	return outcomes
}

// legacyJob is a row the legacy worker's claim returned.
type legacyJob struct{ id, org, conn, order string }

// legacyClaim runs the legacy worker's claim verbatim.
func legacyClaim(ctx context.Context, db querier) ([]legacyJob, error) {
	rows, err := db.Query(ctx, legacyClaimSQL, pgx.QueryExecModeExec, claimLimit)
	if err != nil {
		return nil, fmt.Errorf("legacy claim: %w", err)
	}
	defer rows.Close()
	col := map[string]int{}
	for i, f := range rows.FieldDescriptions() {
		if _, ok := col[f.Name]; !ok {
			col[f.Name] = i
		}
	}
	var out []legacyJob
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			return nil, err
		}
		out = append(out, legacyJob{id: uuidText(v[col["id"]]), org: uuidText(v[col["organization_id"]]),
			conn: uuidText(v[col["integration_connection_id"]]), order: uuidText(v[col["local_entity_id"]])})
	}
	return out, rows.Err()
}

// uuidText renders a uuid as pgx decodes it ([16]byte) in its text form.
func uuidText(v any) string {
	b, ok := v.([16]byte)
	if !ok {
		return fmt.Sprint(v)
	}
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// legacyWork is the legacy worker on a group of claimed jobs, job after job:
// select the purchase order, load the connection, a short fake provider
// call, mark the row completed.
func legacyWork(ctx context.Context, pool *pgxpool.Pool, jobs []legacyJob, ev *churnEvents) {
	for _, j := range jobs {
		for _, q := range []string{legacyOrderSQL, legacyConnectionSQL} {
			arg := j.order
			if q == legacyConnectionSQL {
				arg = j.conn
			}
			rows, err := pool.Query(ctx, q, pgx.QueryExecModeExec, arg, j.org)
			if err == nil {
				for rows.Next() {
				}
				rows.Close()
				err = rows.Err()
			}
			if err != nil {
				ev.fail(fmt.Errorf("legacy job: %w", err))
				return
			}
		}
		time.Sleep(churnFakeCall)
		if _, err := pool.Exec(ctx, legacyCompleteSQL, pgx.QueryExecModeExec, j.id, "ref-"+j.id); err != nil {
			ev.fail(fmt.Errorf("legacy job: %w", err))
			return
		}
		ev.add(func(m *churnMinute) { m.Completed++ })
	}
}

// Targets of the churn run.
const (
	targetChurnCPU   = 1.0 // ours / legacy, PostgreSQL CPU per completed command
	targetChurnClaim = 1.5 // largest size / smallest, claim p50 and claim time per claimed row
)

// churnFind returns the run of variant at rows.
func churnFind(runs []churnRun, variant string, rows int) (churnRun, bool) {
	for _, r := range runs {
		if r.Variant == variant && r.Rows == rows {
			return r, true
		}
	}
	return churnRun{}, false
}

// churnSizesOf lists the sizes of runs, in run order.
func churnSizesOf(runs []churnRun) []int {
	var out []int
	for _, r := range runs {
		if !slices.Contains(out, r.Rows) {
			out = append(out, r.Rows)
		}
	}
	return out
}

func usMs(d time.Duration) string {
	return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond))
}

func churnRows(runs []churnRun) []tableRow {
	var t []tableRow
	sizes := churnSizesOf(runs)
	for _, size := range sizes {
		ours, ok1 := churnFind(runs, churnOurs, size)
		legacy, ok2 := churnFind(runs, churnLegacy, size)
		if !ok1 || !ok2 {
			continue
		}
		o, l := ours.steady(), legacy.steady()
		ratio := float64(o.cpuPerCompleted()) / float64(max(l.cpuPerCompleted(), 1))
		t = append(t, tableRow{"10", fmt.Sprintf("Churn from %s rows (%d enqueues/s, claims of %d every %s, autovacuum %s): PostgreSQL CPU per completed command, enqueue included, steady state", rows(size), ours.Rate, claimLimit, churnClaimEvery, cmp.Or(ours.Autovacuum, "on")),
			fmt.Sprintf("%s (%d completed; claim p50 %s, p95 %s; backlog at the end %d)", usMs(o.cpuPerCompleted()), o.Completed, ms(percentile(o.Claims, 0.5)), ms(percentile(o.Claims, 0.95)), ours.Backlog),
			fmt.Sprintf("legacy: %s (%d completed; claim p50 %s, p95 %s; backlog at the end %d)", usMs(l.cpuPerCompleted()), l.Completed, ms(percentile(l.Claims, 0.5)), ms(percentile(l.Claims, 0.95)), legacy.Backlog),
			fmt.Sprintf("ours/legacy %s (backends %s; autovacuum %s against %s, shared processes %s against %s per completed)", x(ratio),
				x(float64(o.perCompleted(o.backends()))/float64(max(l.perCompleted(l.backends()), 1))),
				usMs(o.perCompleted(o.Autovacuum)), usMs(l.perCompleted(l.Autovacuum)),
				usMs(o.perCompleted(o.Shared)), usMs(l.perCompleted(l.Shared))),
			fmt.Sprintf("≤ %.1f×", targetChurnCPU), status(ratio <= targetChurnCPU)})
		t = append(t, tableRow{"10", fmt.Sprintf("Churn from %s rows: outbox row versions written per completed command (insert and updates), HOT share of the updates, steady state", rows(size)),
			o.versionsPerCompleted(), "legacy: " + l.versionsPerCompleted(), "", "two updates per job", "reported"})
		for _, r := range runs {
			if r.Rows != size || r.Variant == churnOurs || r.Variant == churnLegacy {
				continue
			}
			v := r.steady()
			t = append(t, tableRow{"10", fmt.Sprintf("Churn from %s rows, %s: PostgreSQL CPU per completed command; outbox row versions", rows(size), r.Variant),
				fmt.Sprintf("%s; %s", usMs(v.cpuPerCompleted()), v.versionsPerCompleted()),
				fmt.Sprintf("ours: %s; %s; legacy: %s", usMs(o.cpuPerCompleted()), o.versionsPerCompleted(), usMs(l.cpuPerCompleted())),
				"CPU " + x(float64(v.cpuPerCompleted())/float64(max(o.cpuPerCompleted(), 1))) + " ours, " +
					x(float64(v.cpuPerCompleted())/float64(max(l.cpuPerCompleted(), 1))) + " legacy", "", "lever"})
		}
	}
	if len(sizes) >= 2 {
		small, ok1 := churnFind(runs, churnOurs, sizes[0])
		large, ok2 := churnFind(runs, churnOurs, sizes[len(sizes)-1])
		if ok1 && ok2 {
			s, l := small.steady(), large.steady()
			lat := float64(percentile(l.Claims, 0.5)) / float64(max(percentile(s.Claims, 0.5), 1))
			per := l.claimMsPerRow(churnOurs) / max(s.claimMsPerRow(churnOurs), 1e-9)
			t = append(t, tableRow{"10", fmt.Sprintf("Churn: our claim from %s rows against from %s rows, steady state: p50 latency; server execution time per claimed row", rows(large.Rows), rows(small.Rows)),
				fmt.Sprintf("%s rows: p50 %s, %.4f ms per claimed row", rows(large.Rows), ms(percentile(l.Claims, 0.5)), l.claimMsPerRow(churnOurs)),
				fmt.Sprintf("%s rows: p50 %s, %.4f ms per claimed row", rows(small.Rows), ms(percentile(s.Claims, 0.5)), s.claimMsPerRow(churnOurs)),
				fmt.Sprintf("latency %s, per row %s", x(lat), x(per)), fmt.Sprintf("≤ %.1f× each", targetChurnClaim),
				status(lat <= targetChurnClaim && per <= targetChurnClaim)})
		}
	}
	return t
}

// churnShares renders each family's share of the statements' execution time.
func churnShares(m churnMinute) string {
	return executionShares(m.Families, churnFamilyOrder, m.Completed)
}

// executionShares renders each family's share of the statements' execution
// time, in order (a family missing from order is left out), and, when jobs
// is set, its execution time per 1,000 jobs.
func executionShares(families map[string]familyUse, order []string, jobs int) string {
	var total float64
	for _, f := range families {
		total += f.ExecMs
	}
	if total == 0 {
		return ""
	}
	var parts []string
	for _, name := range order {
		f, ok := families[name]
		if !ok || f.ExecMs <= 0 {
			continue
		}
		part := fmt.Sprintf("%s %.0f%%", name, 100*f.ExecMs/total)
		if jobs > 0 {
			part += fmt.Sprintf(" (%.0f ms)", f.ExecMs*1000/float64(jobs))
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

func churnMarkdown(runs []churnRun) string {
	if len(runs) == 0 {
		return ""
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	r0 := runs[0]
	p("\n## Churn\n\n")
	p("Each starting size is bulk-loaded set-based into a fresh migrated database (%d organizations with a connection each; every outbox row `completed`, created a second apart up to now; the producers' purchase orders inserted up front), then one `ANALYZE`, and cloned (`create database ... template ... strategy file_copy`) for the legacy worker with every outbox index but the primary key dropped and a plain `(status, created_at)` index added, and for each lever run. Autovacuum stays at its defaults and nothing runs `VACUUM`. The variants take turns of %s on one server, each on its own database and its own pool of %d connections that stays open, until each has run %d turns (%s); the order of the turns reverses every round (ours, legacy, legacy, ours, ...), so that a slow minute of the machine lands on each side alike. A turn runs its producers and claims for its length, then its workers finish what it claimed; what it enqueued and left unclaimed waits for its next turn:\n\n",
		churnOrgs, r0.Bucket, churnPoolSize, len(r0.Minutes), r0.Bucket*time.Duration(len(r0.Minutes)))
	p("- **Producers**: %d enqueues a second (one per tick, each from its own goroutine, as independent host requests), round-robin over the organizations, each for a purchase order of its own; ours through `select integration_outbox_enqueue(...)`, the legacy host through a plain `INSERT`; both sent as node-postgres sends a parameterised query (an unnamed statement, planned per call).\n", r0.Rate)
	p("- **Ours**: every %s a claim of %d through `outbox.Store.ClaimBatch` (circuit breaker on, DISPATCH_MAX_IN_FLIGHT 5,000, CONNECTION_MAX_IN_FLIGHT 10, the organization walk rotated as the dispatcher does), the dead-letter sweep (`DeadLetterExpired`) before every %dth claim as once per dispatch run; each batch goes in groups of %d to concurrent workers that `Start` them, load their purchase orders (`purchaseorder.Command.Load`), wait %s for a fake provider call, and `Record` them completed (provider called, circuit success).\n", churnClaimEvery, claimLimit, churnSweepEvery, churnGroup, churnFakeCall)
	p("- **Legacy**: every %s its claim (`bench/testdata/legacy_claim.sql` verbatim, limit %d); each batch in groups of %d to concurrent workers that, job after job, select the purchase order, load the connection, wait %s, and update the row to `completed`.\n\n", churnClaimEvery, claimLimit, churnGroup, churnFakeCall)
	p("Per turn: claim latency p50/p95 (ours: `ClaimBatch`, its transaction included; legacy: the statement), rows claimed and completed, PostgreSQL's CPU per completed command (`/proc/<pid>/schedstat` of the server's processes, sampled every %s and charged by process title: the variant's backends, its database's autovacuum workers and its parallel workers wherever they ran, and the cluster's shared processes, checkpointer and WAL writer included, during its turn), the claim's server execution time per claimed row, the outbox's row versions written per completed command (`pg_stat_user_tables`: inserts and updates, and the share of the updates that were HOT, writing no index entry), and each statement family's share of the server's execution time (`pg_stat_statements` top-level entries of the database). Steady state is every turn after the first.\n\n", churnMeterEvery)
	for _, r := range runs {
		p("**%s, from %s rows** (load %s; backlog at the end %d due rows", r.Variant, rows(r.Rows), r.LoadFor.Round(time.Second), r.Backlog)
		if r.Failures > 0 {
			p("; %d failures, first: %s", r.Failures, clip(r.FirstFailure, 200))
		}
		p(")\n\n| Turn | Enqueued | Claimed | Completed | Claim p50 | Claim p95 | PostgreSQL CPU per completed | of which autovacuum / shared processes | Claim time per claimed row | Outbox row versions per completed | Execution time shares (ms per 1,000 completed) |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		row := func(name string, m churnMinute) {
			p("| %s | %d | %d | %d | %s | %s | %s | %s / %s | %.4f ms | %s | %s |\n", name, m.Enqueued, m.Claimed, m.Completed,
				ms(percentile(m.Claims, 0.5)), ms(percentile(m.Claims, 0.95)), usMs(m.cpuPerCompleted()),
				usMs(m.perCompleted(m.Autovacuum)), usMs(m.perCompleted(m.Shared)), m.claimMsPerRow(r.Variant),
				m.versionsPerCompleted(), churnShares(m))
		}
		for i, m := range r.Minutes {
			row(strconv.Itoa(i+1), m)
		}
		row("steady state", r.steady())
		p("\n")
	}
	return b.String()
}
