package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/testenv"
)

// The claim benchmarks share one throwaway cluster, started by the first
// benchmark that needs it and stopped when the test binary ends.
var (
	servers  testenv.OnDemand
	cluster  *benchEnv
	claimDBs = map[int]claimDatabases{}
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.WithOnDemand(&servers))
}

// claimDatabasesFor loads (once per test binary) the three claim databases
// of a size.
func claimDatabasesFor(b *testing.B, rows int) claimDatabases {
	b.Helper()
	if cluster == nil {
		cluster = &benchEnv{pg: servers.Postgres(b)}
	}
	if dbs, ok := claimDBs[rows]; ok {
		return dbs
	}
	dbs, err := prepareClaimDatabases(context.Background(), cluster, rows)
	if err != nil {
		b.Fatal(err)
	}
	claimDBs[rows] = dbs
	return dbs
}

// BenchmarkClaim measures one claim of 50 (rolled back, so every iteration
// claims the same rows) for our claim and the legacy worker's SQL on the same rows.
// The 1M-row size is left to the bench program (go run .), whose load takes
// most of a minute.
//
//	go test -run '^$' -bench Claim
func BenchmarkClaim(b *testing.B) {
	for _, rows := range []int{10_000, 100_000} {
		for _, v := range claimVariants {
			b.Run(fmt.Sprintf("rows=%d/%s", rows, strings.NewReplacer(" ", "", ",", "-", "(", "", ")", "").Replace(v)), func(b *testing.B) {
				dbs := claimDatabasesFor(b, rows)
				ctx := context.Background()
				conn, err := pgx.Connect(ctx, dbs[v])
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close(ctx)
				var total time.Duration
				for b.Loop() {
					d, err := claimOnce(ctx, conn, v)
					if err != nil {
						b.Fatal(err)
					}
					total += d
				}
				b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs-statement/op")
			})
		}
	}
}

// TestLegacyClaimSQLIsTheFixture checks that the benchmark runs the legacy worker's
// claim exactly as the fixture holds it: one statement, its claim shape.
func TestLegacyClaimSQLIsTheFixture(t *testing.T) {
	for _, want := range []string{"for update of o skip locked", "order by o.created_at", "limit $1"} {
		if !strings.Contains(legacyClaimSQL, want) {
			t.Errorf("legacyClaimSQL lacks %q", want)
		}
	}
	if strings.HasSuffix(legacyClaimSQL, "\n") || strings.Count(legacyClaimSQL, ";") != 0 {
		t.Errorf("legacyClaimSQL must be one statement without a trailing newline: %q", legacyClaimSQL)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []time.Duration
		want time.Duration
	}{
		{nil, 0},
		{[]time.Duration{3}, 3},
		{[]time.Duration{5, 1, 3}, 3},
		{[]time.Duration{4, 1, 3, 2}, 2},
	} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestCostPerMillion(t *testing.T) {
	p := pipelineResult{
		Jobs:           1000,
		DispatchRuns:   []time.Duration{1500 * time.Microsecond}, // billed 2 ms
		SendBatchCalls: 100,
		PushRuns:       make([]time.Duration, 100),
		DescribeCalls:  10, GetCalls: 10,
	}
	for i := range p.PushRuns {
		p.PushRuns[i] = 10 * time.Millisecond
	}
	got := costPerMillion(p, lambdaMemory{MB: 1024, Arch: "arm64"}, 0)
	want := cost{
		LambdaRequests: 101_000,
		GBSeconds:      (0.002 + 100*0.010) * 1000,
		SQSRequests:    (100 + 2*100) * 1000,
		SecretCalls:    20_000,
	}
	if !near(got.LambdaRequests, want.LambdaRequests) || !near(got.GBSeconds, want.GBSeconds) ||
		!near(got.SQSRequests, want.SQSRequests) || !near(got.SecretCalls, want.SecretCalls) {
		t.Fatalf("costPerMillion = %+v, want %+v", got, want)
	}
}

func near(a, b float64) bool { return a-b < 1e-6*b+1e-9 && b-a < 1e-6*b+1e-9 }
