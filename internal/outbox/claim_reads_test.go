package outbox_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

// busyConnectionLoadSQL: ten organizations with a connection each (ordered,
// the default), $1 rows created a second apart, every 100th due (three in
// four queued, one in four failed and due again), each of its own purchase
// order, all on the first connection, the rest completed: no follower
// anywhere, every due row claimable (bench measurement 1's load).
const busyConnectionLoadSQL = `
insert into integration_connections (organization_id, provider, credential_reference, config_json)
select gen_random_uuid(), 'sandbox', 'integrations/bench/' || g, '{}' from generate_series(1, 10) g;
with c as (select id, organization_id, (row_number() over (order by id) - 1)::int as n from integration_connections)
insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
    local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count, next_attempt_at,
    completed_at, created_at)
select c.organization_id, c.id, 'sandbox', 'push_purchase_order', 'purchase_order', gen_random_uuid(),
    '{"externalSupplierId": "S"}', 'k-' || g,
    case when g % 100 <> 0 then 'completed' when g % 400 = 0 then 'failed' else 'queued' end,
    case when g % 100 <> 0 then 1 when g % 400 = 0 then 2 else 0 end,
    case when g % 400 = 0 then now() - interval '1 minute' end,
    case when g % 100 <> 0 then now() end,
    now() - make_interval(secs => $1::int - g)
from generate_series(1, $1::int) g
join c on c.n = g % 10`

// walkEntriesPassedOver loads rows onto a fresh database and returns how
// many entries of the claim's walk index the scheduled claim of 50 read and
// dropped (the "Rows Removed by Filter" of its scans of that index, as
// auto_explain reports the statement); the claim is rolled back.
func walkEntriesPassedOver(t *testing.T, rows int) float64 {
	t.Helper()
	ctx := context.Background()
	f := pg.NewDB(t)
	if _, err := f.Pool.Exec(ctx, strings.ReplaceAll(busyConnectionLoadSQL, "$1::int", strconv.Itoa(rows))); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Pool.Exec(ctx, "vacuum (analyze) external_integration_outbox, integration_connections"); err != nil {
		t.Fatal(err)
	}
	var passed float64
	claimPlanNodes(t, f, outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: 15 * time.Minute}, "with recursive budget", 50,
		func(node map[string]any) {
			if node["Index Name"] == "external_integration_outbox_walk_unparked_idx" {
				removed, _ := node["Rows Removed by Filter"].(float64)
				loops, _ := node["Actual Loops"].(float64)
				passed += removed * loops
			}
		})
	return passed
}

// A claim reads the walk index up to what it takes on a connection whose
// due rows are all claimable, however many there are: the probe that looks
// for held-back rows older than the pair's first claimable one
// (claim_scheduled.sql, park_pairs) and the park's window seek to that bound
// in the walk index. With the bound in an OR beside "is null" the probe read
// every entry of the pair (bench measurement 1, 1M rows with 10,000 due on
// one connection: the claim took 55 ms against 4 ms before the followers
// were parked).
func TestAClaimReadsTheWalkIndexOnlyUpToWhatItTakes(t *testing.T) {
	t.Parallel()
	const rows = 300_000 // 3,000 due on the busy connection
	passed := walkEntriesPassedOver(t, rows)
	if passed > 100 {
		t.Errorf("the claim read and dropped %v entries of the walk index with 3,000 due rows on one connection, all claimable", passed)
	}
}

// acceptedFollowersLoadSQL adds to the one-tenant shape (oneTenantLoadSQL)
// a purchase order whose oldest command was accepted by the provider (in
// flight, its follow-up an hour away) and $1 queued commands of it behind
// that one, older than every other due row.
const acceptedFollowersLoadSQL = `
insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
    local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count,
    provider_status, next_attempt_at, claim_token, created_at)
select '00000000-0000-4000-8000-000000000001', '00000000-0000-4000-9000-000000000001', 'sandbox',
    'push_purchase_order', 'purchase_order', '00000000-0000-4000-a000-000000000001', '{"externalSupplierId": "S"}',
    'follower-' || g, case when g = 0 then 'processing' else 'queued' end, case when g = 0 then 1 else 0 end,
    case when g = 0 then 'accepted' end, case when g = 0 then now() + interval '1 hour' end,
    case when g = 0 then gen_random_uuid() end,
    now() - interval '30 days' + make_interval(secs => g)
from generate_series(0, $1::int) g`

// outboxEntriesRead is how many entries of the outbox's indexes the claim p
// read on f (returned or dropped by a filter, over every loop of every index
// scan of the outbox in the plan of the claim statement whose text holds
// marker, as auto_explain reports it), in all and of the waiting index; the
// claim must take want rows, and is rolled back.
func outboxEntriesRead(t *testing.T, f *testenv.Fixture, p outbox.ClaimParams, marker string, want int) (all, waiting float64) {
	t.Helper()
	claimPlanNodes(t, f, p, marker, want, func(node map[string]any) {
		if name, _ := node["Index Name"].(string); strings.HasPrefix(name, "external_integration_outbox_") {
			rows, _ := node["Actual Rows"].(float64)
			removed, _ := node["Rows Removed by Filter"].(float64)
			loops, _ := node["Actual Loops"].(float64)
			all += (rows + removed) * loops
			if name == "external_integration_outbox_waiting_idx" {
				waiting += (rows + removed) * loops
			}
		}
	})
	return all, waiting
}

// claimPlanNodes runs the claim p on f under auto_explain, in a
// transaction rolled back, and hands visit every node of the plan of the
// claim statement whose text holds marker; the claim must take want rows
// and that statement be reported once.
func claimPlanNodes(t *testing.T, f *testenv.Fixture, p outbox.ClaimParams, marker string, want int, visit func(node map[string]any)) {
	t.Helper()
	ctx := context.Background()
	rec := &planRecorder{}
	tx, err := ourPool(t, f, rec).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	claims, err := outbox.NewStore(tx).WithCircuit(outbox.Circuit{FailureThreshold: 5, Cooldown: time.Minute}).Claim(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	plans, errs := rec.take()
	claimPlans := 0
	for _, pl := range plans {
		if strings.Contains(pl.Query, marker) {
			claimPlans++
			walkPlan(pl.Plan, visit)
		}
	}
	if len(claims) != want || claimPlans != 1 || len(errs) != 0 {
		t.Fatalf("claimed %d rows (want %d); auto_explain reported %d claim statements (want 1); errors %v",
			len(claims), want, claimPlans, errs)
	}
}

// walkPlan hands visit node and every node below it.
func walkPlan(node map[string]any, visit func(node map[string]any)) {
	visit(node)
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		if m, ok := c.(map[string]any); ok {
			walkPlan(m, visit)
		}
	}
}

// parkedFollowersDB is a fresh database with the one-tenant shape of rows
// (oneTenantLoadSQL) and followers queued commands of one purchase order
// behind its accepted head (acceptedFollowersLoadSQL), vacuumed and
// analyzed, autovacuum off on the outbox, then the followers parked by the
// claims of 50 (committed, their rows put back after each): the planner's
// statistics are those of before the parking.
func parkedFollowersDB(t *testing.T, rows, followers int) *testenv.Fixture {
	t.Helper()
	ctx := context.Background()
	f := pg.NewDB(t)
	load := strings.ReplaceAll(oneTenantLoadSQL, "$1::int", strconv.Itoa(rows)) + ";" +
		strings.ReplaceAll(acceptedFollowersLoadSQL, "$1::int", strconv.Itoa(followers)) + `;
		alter table external_integration_outbox set (autovacuum_enabled = false)`
	for _, sql := range []string{load, "vacuum (analyze) external_integration_outbox, integration_connections"} {
		if _, err := f.Pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	s := outbox.NewStore(f.Pool).WithCircuit(outbox.Circuit{FailureThreshold: 5, Cooldown: time.Minute})
	for range followers/200 + 2 {
		b := claimBatch(t, s, outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: 15 * time.Minute})
		if _, err := s.Release(ctx, b.Claims); err != nil {
			t.Fatal(err)
		}
	}
	var parked int
	if err := f.Pool.QueryRow(ctx, `select count(*) from external_integration_outbox
		where status = 'queued' and waiting_for_outbox_id is not null`).Scan(&parked); err != nil {
		t.Fatal(err)
	}
	if parked != followers {
		t.Fatalf("%d followers parked, want all %d", parked, followers)
	}
	return f
}

// Once parked, followers cost the claim nothing: it reads none of them. On
// the shape of a reported slow claim (one organization, one connection, due
// commands each of its own purchase order, and 2,000 queued commands of one
// purchase order behind its accepted head, older than every other due row),
// the claims of 50, committed and their rows put back after each, park the
// followers 200 a claim; then the scheduled claim, and the listed claim of
// the 10 oldest other due rows, read as many index entries as on the same
// load without them. The planner's statistics are those of before the
// parking, as on a large outbox, where the parked rows are far from what
// makes autovacuum analyze the table again (10% of its rows changed): they
// say that no row waits, and the claims' generic plans read the whole
// waiting index for that (as the hash of the claimed rows' followers, or as
// the outer side of a join with the run's heads, even with none): 10,000
// parked rows at every claim took the claim of 50 from 2.65 ms to 7.42 ms
// at 1M rows.
func TestAClaimReadsNoParkedFollower(t *testing.T) {
	t.Parallel()
	const rows, followers = 40_000, 2_000
	ctx := context.Background()
	dbs := []*testenv.Fixture{parkedFollowersDB(t, rows, 0), parkedFollowersDB(t, rows, followers)}
	scheduled := outbox.ClaimParams{Limit: 50, MaxAttempts: 10, Lease: 15 * time.Minute}
	for _, c := range []struct {
		name, marker string
		params       func(f *testenv.Fixture) outbox.ClaimParams
		want         int
	}{
		{"scheduled claim", "with recursive budget", func(*testenv.Fixture) outbox.ClaimParams { return scheduled }, 50},
		{"listed claim", "), listed as (", func(f *testenv.Fixture) outbox.ClaimParams {
			rows, err := f.Pool.Query(ctx, `select id::text from external_integration_outbox
				where status = 'queued' and local_entity_id <> $1 order by created_at limit 10`, followedOrder)
			if err != nil {
				t.Fatal(err)
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			p := scheduled
			p.Limit, p.IDs = len(ids), ids
			return p
		}, 10},
	} {
		without, _ := outboxEntriesRead(t, dbs[0], c.params(dbs[0]), c.marker, c.want)
		with, waiting := outboxEntriesRead(t, dbs[1], c.params(dbs[1]), c.marker, c.want)
		t.Logf("index entries read by the %s: %v without the followers, %v with %d parked (%v of the waiting index)",
			c.name, without, with, followers, waiting)
		if with > without+float64(c.want) || waiting > float64(c.want) {
			t.Errorf("with %d followers parked the %s read %v index entries (%v of the waiting index), against %v without them",
				followers, c.name, with, waiting, without)
		}
	}
}
