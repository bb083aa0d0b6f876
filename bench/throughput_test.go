package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"integration-outbox/internal/purchaseorder"
)

func TestThroughputFamily(t *testing.T) {
	cases := map[string]string{
		// River's statements as pg_stat_statements keeps them: sqlc's name
		// comment first, constants replaced.
		"-- name: JobGetAvailable :many\nWITH locked_jobs AS (\n    SELECT\n        id, args":                    "fetch",
		"-- name: JobSetStateIfRunningMany :many\nWITH job_input AS (\n    SELECT\n        unnest($1::bigint[])": "complete",
		"-- name: LeaderAttemptElect :one\nINSERT INTO river_leader":                                             "other",
		purchaseorder.LoadStatement():                "purchase order",
		"\nwith recursive budget as (\n    select 1": "claim",
		"commit": "other",
	}
	for q, want := range cases {
		if got := throughputFamily(q); got != want {
			t.Errorf("throughputFamily(%q) = %q, want %q", clip(q, 60), got, want)
		}
	}
}

func TestExecutionSharesPerThousandJobs(t *testing.T) {
	f := map[string]familyUse{"purchase order": {ExecMs: 30}, "fetch": {ExecMs: 10}, "other": {ExecMs: 0}}
	if got, want := executionShares(f, throughputFamilyOrder, 2000), "fetch 25% (5 ms), purchase order 75% (15 ms)"; got != want {
		t.Errorf("shares = %q, want %q", got, want)
	}
	if got := executionShares(nil, throughputFamilyOrder, 2000); got != "" {
		t.Errorf("no statements: %q", got)
	}
}

// TestPOLoadLinesMatchTheHarness: the lines carry the field names
// bench/river's poLoadArgs reads, a missing location left out (null).
func TestPOLoadLinesMatchTheHarness(t *testing.T) {
	loc := "l1"
	b, err := poLoadLines([]poLoadJob{
		{OutboxID: "o1", OrganizationID: "g", OrderID: "p1", ConnectionID: "c", Provider: "sandbox"},
		{OutboxID: "o2", OrganizationID: "g", OrderID: "p2", LocationID: &loc, ConnectionID: "c", Provider: "sandbox"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"outboxId":"o1","organizationId":"g","orderId":"p1","connectionId":"c","provider":"sandbox"}` + "\n" +
		`{"outboxId":"o2","organizationId":"g","orderId":"p2","locationId":"l1","connectionId":"c","provider":"sandbox"}` + "\n"
	if string(b) != want {
		t.Errorf("lines:\n%s\nwant:\n%s", b, want)
	}
}

func TestThroughputRowsHoldOurPostgresCPUToRiverPOLoad(t *testing.T) {
	river := func(worker string, seconds, pg float64) riverResult {
		return riverResult{Jobs: 1000, Worker: worker, Seconds: seconds, JobsPerSecond: 1000 / seconds, MaxWorkers: 2000,
			PoolMaxConns: 4, RiverVersion: "v0.51.2", CPUSeconds: 0.1, PostgresCPUSeconds: pg,
			Families: map[string]familyUse{"fetch": {ExecMs: 10}, "purchase order": {ExecMs: 30}}}
	}
	tp := throughputResult{Jobs: 1000, Consumers: 10,
		Ours: ourRun{Took: time.Second, Batches: 100, CPU: cpuUse{Self: 200 * time.Millisecond, Postgres: 600 * time.Millisecond},
			Families: map[string]familyUse{"claim": {ExecMs: 20}, "purchase order": {ExecMs: 20}}},
		River: river(riverNoop, 0.25, 0.1), RiverPOLoad: river(riverPOLoad, 0.5, 0.5)}
	rows := throughputRows(tp)
	if len(rows) != 4 {
		t.Fatalf("got %d rows, want throughput, CPU, PostgreSQL CPU per command and shares", len(rows))
	}
	if rows[0].ratio != "ours/River no-op 0.25×, ours/River po-load 0.50×" || rows[0].status == "met" {
		t.Errorf("throughput row: ratio %q, status %q", rows[0].ratio, rows[0].status)
	}
	pg := rows[2]
	if pg.ours != "0.600 ms" || pg.ratio != "ours/River po-load 1.20×; ours/River no-op 6.00×" || pg.status != "met" {
		t.Errorf("PostgreSQL CPU row: ours %q, ratio %q, status %q", pg.ours, pg.ratio, pg.status)
	}
	if rows[3].ours != "claim 50% (20 ms), purchase order 50% (20 ms)" || !strings.HasPrefix(rows[3].beside, "River po-load: fetch 25%") {
		t.Errorf("shares row: %q / %q", rows[3].ours, rows[3].beside)
	}

	tp.RiverPOLoad.PostgresCPUSeconds = 0.3
	if rows := throughputRows(tp); rows[2].status == "met" {
		t.Errorf("ours at 2× River po-load's PostgreSQL CPU is %q", rows[2].status)
	}
	tp.RiverPOLoad = riverResult{}
	if rows := throughputRows(tp); len(rows) != 2 || rows[0].ratio != "ours/River 0.25×" {
		t.Errorf("without the po-load run: %d rows, ratio %q", len(rows), rows[0].ratio)
	}
}

// Every family a statement can be put in is reported: a family missing
// from an order's list would vanish from the shares (the lighter record's
// did from measurement 5 when it came).
func TestEveryFamilyIsReported(t *testing.T) {
	for _, c := range []struct {
		name     string
		families []statementFamily
		order    []string
		// notRun are families whose statements the measurement never runs.
		notRun []string
	}{
		{"churn", churnFamilies, churnFamilyOrder, nil},
		// Measurement 5 has no host writing and no legacy worker.
		{"throughput", throughputFamilies, throughputFamilyOrder,
			[]string{"enqueue", "legacy insert", "legacy claim", "legacy order", "legacy connection", "legacy complete"}},
	} {
		for _, f := range c.families {
			if !slices.Contains(c.order, f.Name) && !slices.Contains(c.notRun, f.Name) {
				t.Errorf("%s: family %q is not in the order it is reported in", c.name, f.Name)
			}
		}
	}
}
