package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestChurnBucket(t *testing.T) {
	cases := map[time.Duration]time.Duration{
		6 * time.Minute:  30 * time.Second,
		3 * time.Minute:  30 * time.Second,
		2 * time.Minute:  30 * time.Second,
		40 * time.Second: 10 * time.Second,
		2 * time.Second:  time.Second,
	}
	for d, want := range cases {
		if got := churnBucket(d); got != want {
			t.Errorf("churnBucket(%s) = %s, want %s", d, got, want)
		}
	}
}

func TestFamilyOf(t *testing.T) {
	cases := map[string]string{
		churnEnqueueSQL:     "enqueue",
		legacyInsertSQL:     "legacy insert",
		legacyClaimSQL:      "legacy claim",
		legacyOrderSQL:      "legacy order",
		legacyConnectionSQL: "legacy connection",
		legacyCompleteSQL:   "legacy complete",
		"select set_config('plan_cache_mode', 'force_generic_plan', true),\n    set_config('enable_bitmapscan', 'off', true),\n    pg_advisory_xact_lock(hashtext($1))": "claim",
		"\nwith recursive budget as (\n    select 1": "claim",
		"commit": "other",
		// The two records' routines.
		"select * from integration_outbox_sql_outbox_record_completed_0123456789ab($1)":           "record (completed)",
		"select * from integration_outbox_sql_outbox_record_0123456789ab($1, $2, $3, $4, $5, $6)": "record",
		// As pg_stat_statements keeps them, constants replaced.
		"update external_integration_outbox set status = $3, provider_reference = $2,\n    provider_status = $4":                                                              "legacy complete",
		"insert into external_integration_outbox (organization_id, integration_connection_id, provider,\n    command_type, local_entity_type) values ($1::uuid, $2::uuid, $6": "legacy insert",
	}
	for q, want := range cases {
		if got := familyOf(q); got != want {
			t.Errorf("familyOf(%q) = %q, want %q", clip(q, 60), got, want)
		}
	}
}

func TestSteadyDropsTheFirstBucket(t *testing.T) {
	ms := time.Millisecond
	r := churnRun{Variant: churnOurs, Minutes: []churnMinute{
		{Completed: 100, Claimed: 100, Claims: []time.Duration{50 * ms}, Postgres: 900 * ms,
			Families: map[string]familyUse{"claim": {Calls: 4, ExecMs: 40}}},
		{Completed: 200, Claimed: 150, Claims: []time.Duration{4 * ms, 6 * ms}, Postgres: 100 * ms,
			Families: map[string]familyUse{"claim": {Calls: 4, ExecMs: 3}, "enqueue": {Calls: 200, ExecMs: 9}}},
		{Completed: 200, Claimed: 150, Claims: []time.Duration{5 * ms}, Postgres: 120 * ms,
			Families: map[string]familyUse{"claim": {Calls: 4, ExecMs: 3}, "enqueue": {Calls: 200, ExecMs: 11}}},
	}}
	s := r.steady()
	if s.Completed != 400 || s.Claimed != 300 || len(s.Claims) != 3 {
		t.Fatalf("steady = %d completed, %d claimed, %d claims; want 400, 300, 3", s.Completed, s.Claimed, len(s.Claims))
	}
	if got := s.cpuPerCompleted(); got != 550*time.Microsecond {
		t.Errorf("CPU per completed = %s, want 550µs", got)
	}
	if got := s.claimMsPerRow(churnOurs); got != 0.02 {
		t.Errorf("claim time per claimed row = %v ms, want 0.02", got)
	}
	if got := percentile(s.Claims, 0.5); got != 5*ms {
		t.Errorf("claim p50 = %s, want 5ms", got)
	}
	// Each family's share, and its execution time per 1,000 completed
	// commands (20 ms of enqueue and 6 ms of claim over 400).
	if got := churnShares(s); got != "enqueue 77% (50 ms), claim 23% (15 ms)" {
		t.Errorf("shares = %q", got)
	}
	one := churnRun{Minutes: r.Minutes[:1]}
	if got := one.steady().Completed; got != 100 {
		t.Errorf("a run of one bucket: steady completed %d, want that bucket's 100", got)
	}
}

func TestChurnRowsCompareOursWithLegacyAndSizes(t *testing.T) {
	ms := time.Millisecond
	run := func(variant string, size int, cpu time.Duration, claim time.Duration, claimExec float64) churnRun {
		m := churnMinute{Completed: 1000, Claimed: 1000, Claims: []time.Duration{claim}, Postgres: cpu,
			Families: map[string]familyUse{claimFamily(variant): {ExecMs: claimExec}},
			Versions: rowVersions{Inserted: 1000, Updated: 3000, HOT: 750}}
		return churnRun{Variant: variant, Rows: size, Rate: 200, Bucket: time.Minute, Minutes: []churnMinute{m, m}}
	}
	runs := []churnRun{
		run(churnOurs, 40000, 500*ms, 5*ms, 10), run(churnLegacy, 40000, 400*ms, 12*ms, 30),
		run(churnOurs, 1000000, 600*ms, 10*ms, 12), run(churnLegacy, 1000000, 400*ms, 300*ms, 900),
	}
	// Ours at 40k: 500 ms of which autovacuum 200, shared 50 (backends
	// 250); legacy: 400 of which autovacuum 50, shared 50 (backends 300).
	for i := range runs[0].Minutes {
		runs[0].Minutes[i].Autovacuum, runs[0].Minutes[i].Shared = 200*ms, 50*ms
		runs[1].Minutes[i].Autovacuum, runs[1].Minutes[i].Shared = 50*ms, 50*ms
	}
	rows := churnRows(runs)
	// Per size: the CPU row and the row versions row; then the sizes row.
	if len(rows) != 5 {
		t.Fatalf("got %d rows, want 5", len(rows))
	}
	if rows[0].ratio != "ours/legacy 1.25× (backends 0.83×; autovacuum 0.200 ms against 0.050 ms, shared processes 0.050 ms against 0.050 ms per completed)" || rows[0].status == "met" {
		t.Errorf("40k CPU row: ratio %q status %q", rows[0].ratio, rows[0].status)
	}
	// Two steady buckets of 1,000 completed, 1,000 inserts, 3,000 updates of
	// which 750 HOT each.
	if want := "4.00 (1.00 inserted, 3.00 updated; 25% of updates HOT)"; rows[1].ours != want {
		t.Errorf("40k row versions: %q, want %q", rows[1].ours, want)
	}
	if rows[4].ratio != "latency 2.00×, per row 1.20×" || rows[4].status == "met" {
		t.Errorf("size row: ratio %q status %q", rows[4].ratio, rows[4].status)
	}
	// The CPU row names the run's autovacuum setting, on where none was read.
	if !strings.Contains(rows[0].measure, "autovacuum on)") {
		t.Errorf("40k CPU row without the autovacuum setting: %q", rows[0].measure)
	}
	off := slices.Clone(runs)
	off[2].Autovacuum = "off"
	if m := churnRows(off)[2].measure; !strings.Contains(m, "from 1M rows") || !strings.Contains(m, "autovacuum off)") {
		t.Errorf("1M CPU row of a run without autovacuum: %q", m)
	}
	lever := run(churnFillfactor(90), 40000, 400*ms, 5*ms, 10)
	withLever := churnRows(append(slices.Clone(runs), lever))
	if len(withLever) != 6 || withLever[2].status != "lever" || withLever[2].ratio != "CPU 0.80× ours, 1.00× legacy" {
		t.Errorf("with the fillfactor lever: %d rows; lever row %+v", len(withLever), withLever[min(2, len(withLever)-1)])
	}
	plain := run(churnPlainInsert, 40000, 380*ms, 5*ms, 10)
	withPlain := churnRows(append(slices.Clone(runs), plain, lever))
	if len(withPlain) != 7 || withPlain[2].measure != "Churn from 40k rows, "+churnPlainInsert+": PostgreSQL CPU per completed command; outbox row versions" ||
		withPlain[2].ratio != "CPU 0.76× ours, 0.95× legacy" || withPlain[3].ratio != "CPU 0.80× ours, 1.00× legacy" {
		t.Errorf("with both levers: %d rows; %+v", len(withPlain), withPlain)
	}
	if md := churnMarkdown(runs); !strings.Contains(md, "## Churn") || strings.Count(md, "| steady state |") != 4 {
		t.Errorf("markdown lacks the section or a steady-state row per run:\n%s", md)
	}
}

// partsRows reports each pass of the churn's statements alone, ours
// against the legacy worker, and record_completed.sql against record.sql.
func TestPartsRowsCompareOursWithLegacyAndTheRecords(t *testing.T) {
	cost := func(completed int, parts map[string]time.Duration) partsCost {
		return partsCost{Completed: completed, CPU: parts}
	}
	us := time.Microsecond
	kept := map[string]partsCost{
		churnOurs:      cost(100, map[string]time.Duration{"enqueue": 40000 * us, "claim": 15000 * us, "record": 15000 * us}),
		churnLegacy:    cost(100, map[string]time.Duration{"insert": 30000 * us, "complete": 70000 * us}),
		churnRecordSQL: cost(100, map[string]time.Duration{"enqueue": 40000 * us, "claim": 15000 * us, "record": 25000 * us}),
	}
	if got := kept[churnOurs].per(""); got != 700 {
		t.Fatalf("ours per command = %v µs, want 700", got)
	}
	if got := kept[churnOurs].per("record"); got != 150 {
		t.Fatalf("ours' record per command = %v µs, want 150", got)
	}
	rows := partsRows(&partsResult{Rows: 40000, Conns: 40, Commands: 100, AnalyzeEvery: 2500, Kept: kept,
		Analyzed: map[string]partsCost{churnOurs: {}, churnLegacy: {}}})
	if len(rows) != 1 {
		t.Fatalf("%d rows, want the pass with figures only", len(rows))
	}
	r := rows[0]
	if r.ours != "700 µs (enqueue 400, claim 150, record 150)" ||
		!strings.HasPrefix(r.beside, "legacy: 1000 µs (insert 300, complete 700); ours with every record through record.sql: 800 µs (record 250 µs)") ||
		r.ratio != "ours/legacy 0.70×; record_completed.sql against record.sql 0.60×" {
		t.Errorf("row = %+v", r)
	}
}
