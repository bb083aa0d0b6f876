package main

import (
	"strings"
	"testing"
	"time"
)

func TestBatchLeverRowsCompareWithTheDefaultBatch(t *testing.T) {
	runs := []batchLeverRun{
		{Batch: 10, Jobs: 1000, Run: ourRun{Push: time.Second, Batches: 100, CPU: cpuUse{Self: 200 * time.Millisecond, Postgres: 400 * time.Millisecond}}},
		{Batch: 100, Jobs: 1000, Run: ourRun{Push: 500 * time.Millisecond, Batches: 10, CPU: cpuUse{Self: 100 * time.Millisecond, Postgres: 300 * time.Millisecond}}},
	}
	rows := batchLeverRows(runs)
	if len(rows) != 1 {
		t.Fatalf("got %d rows, want one per larger batch", len(rows))
	}
	r := rows[0]
	if r.ours != "2000 jobs/s; 0.100 + 0.300" || r.beside != "batches of 10: 1000 jobs/s; 0.200 + 0.400" {
		t.Errorf("row: ours %q, beside %q", r.ours, r.beside)
	}
	if r.ratio != "rate 2.00×; PostgreSQL CPU 0.75×" || r.status != "lever" {
		t.Errorf("ratio %q, status %q", r.ratio, r.status)
	}
	if batchLeverRows(runs[:1]) != nil || !strings.Contains(batchLeverMarkdown(runs), "10 and 100") {
		t.Error("one size alone makes no row, and the section names both sizes")
	}
}
