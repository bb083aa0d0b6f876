package overload_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"integration-outbox/bench/overload"
	"integration-outbox/internal/testenv"
)

var pg *testenv.Postgres

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.WithPostgres(&pg))
}

// backlog is the first scenario of `make bench`, small: consumers slower than the
// schedule (2 invocations x batch 10, 2 s a call) under a backlog that
// takes longer than the lease to drain, and a small tenant arriving late.
func backlog() overload.Scenario {
	// Scale: a lease of 3 s real, so a loaded test machine's stalls do not
	// expire it; the drain still takes longer than the lease.
	sc := overload.Scenario{Name: "backlog", Scale: 0.05, Consumers: 2, BatchSize: 10, Latency: 2 * time.Second,
		ProviderTimeout: 10 * time.Second, Lease: time.Minute, DispatchEvery: time.Minute,
		Until: 30 * time.Minute, HealthyOnly: true}
	for i := range 10 {
		sc.Tenants = append(sc.Tenants, overload.Tenant{Name: fmt.Sprintf("t%d", i), Rows: 80})
	}
	sc.Tenants = append(sc.Tenants, overload.Tenant{Name: "small", Rows: 1, After: 2 * time.Minute})
	return sc
}

func run(t *testing.T, sc overload.Scenario, st overload.Settings) overload.Result {
	t.Helper()
	url, err := pg.MigratedDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r, err := overload.Run(context.Background(), url, sc, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s / %s: rows %d, messages/row %.2f, attempts/row %.2f, leases expired %d, calls/row %.2f, rows called twice %d, completed %d, dead %d, wait p50 %s p95 %s",
		sc.Name, st.Name, r.Rows, r.PerRow(r.Messages), r.PerRow(r.Attempts), r.LeasesExpired, r.PerRow(r.Calls),
		r.RowsCalledTwice, r.Completed, r.DeadLettered, r.WaitP50, r.WaitP95)
	return r
}

func TestBacklogUnderTheNewLimitsLeasesNothingItCannotFinish(t *testing.T) {
	t.Parallel()
	sc := backlog()
	r := run(t, sc, overload.Defaults(sc.Consumers, sc.BatchSize))
	if r.Completed != r.Rows {
		t.Fatalf("%d of %d rows completed", r.Completed, r.Rows)
	}
	if r.LeasesExpired != 0 {
		t.Errorf("%d leases expired before their row was started, want 0", r.LeasesExpired)
	}
	if r.PerRow(r.Messages) > 1.01 {
		t.Errorf("%.3f messages per row, want at most 1.01", r.PerRow(r.Messages))
	}
	if r.Calls != r.Rows || r.RowsCalledTwice != 0 {
		t.Errorf("%d provider calls for %d rows (%d rows called more than once), want exactly one each",
			r.Calls, r.Rows, r.RowsCalledTwice)
	}
	if r.Attempts != r.Rows {
		t.Errorf("%d attempts for %d rows, want one each", r.Attempts, r.Rows)
	}
}

func TestBacklogUnderTodaysSettingsLetsLeasesExpire(t *testing.T) {
	t.Parallel()
	sc := backlog()
	// The scenario must show the overload, or the test above proves nothing.
	// Its time is scaled down, so a run whose scheduling happens to drain
	// the backlog inside the lease can miss it (seen once in a CI run): the
	// control may take a second run, and fails when neither overloads.
	r := run(t, sc, overload.Today())
	if r.LeasesExpired == 0 || r.Messages <= r.Rows {
		t.Logf("today's settings did not overload in this run; running the scenario once more")
		r = run(t, sc, overload.Today())
	}
	if r.LeasesExpired == 0 || r.Messages <= r.Rows {
		t.Errorf("today's settings: %d leases expired, %d messages for %d rows; the scenario does not overload",
			r.LeasesExpired, r.Messages, r.Rows)
	}
}

func TestBrokenConnectionIsHeldBackWithoutStarvingHealthyOnes(t *testing.T) {
	t.Parallel()
	sc := overload.Scenario{Name: "one connection down", Scale: 0.02, Consumers: 2, BatchSize: 10,
		Latency: 500 * time.Millisecond, ProviderTimeout: 10 * time.Second, Lease: 15 * time.Minute,
		DispatchEvery: time.Minute, Until: 8 * time.Minute}
	for i := range 5 {
		sc.Tenants = append(sc.Tenants, overload.Tenant{Name: fmt.Sprintf("t%d", i), Rows: 40})
	}
	sc.Tenants = append(sc.Tenants, overload.Tenant{Name: "broken", Rows: 100, Mode: overload.Down})
	r := run(t, sc, overload.Defaults(sc.Consumers, sc.BatchSize))
	b := r.Tenants["broken"]
	t.Logf("broken: %d calls, at most %d at once, %d attempts", b.Calls, b.MaxConcurrent, b.Attempts)
	for i := range 5 {
		if h := r.Tenants[fmt.Sprintf("t%d", i)]; h.Completed != h.Rows {
			t.Errorf("healthy tenant t%d: %d of %d rows completed beside the broken connection", i, h.Completed, h.Rows)
		}
	}
	if b.MaxConcurrent > 10 {
		t.Errorf("the broken connection saw %d concurrent calls, above CONNECTION_MAX_IN_FLIGHT 10", b.MaxConcurrent)
	}
	// 5 failures open the circuit (plus what was in flight, at most 10), then
	// one probe per cooldown (60 s, 120 s, 240 s, ... in 8 minutes).
	if b.Calls > 5+10+6 {
		t.Errorf("the broken connection got %d calls in 8 minutes with the circuit breaker on", b.Calls)
	}
	if b.Attempts > b.Calls {
		t.Errorf("the broken connection's rows used %d attempts for %d calls: held rows used attempts", b.Attempts, b.Calls)
	}
}
