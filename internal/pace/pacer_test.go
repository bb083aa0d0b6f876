package pace_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"integration-outbox/internal/pace"
	"integration-outbox/internal/testenv"
)

var pg *testenv.Postgres

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.WithPostgres(&pg))
}

// containers opens n pools on the database at url, one per container.
func containers(t *testing.T, url string, n int) []*pace.Pacer {
	t.Helper()
	out := make([]*pace.Pacer, n)
	for i := range out {
		out[i] = pace.NewPacer(testenv.OpenPool(t, url, nil))
	}
	return out
}

// maxInWindow is the most calls of sorted that fall in any window of
// length w (a call at a window's start counts, one at its end does not).
func maxInWindow(sorted []time.Time, w time.Duration) int {
	best, j := 0, 0
	for i := range sorted {
		for sorted[i].Sub(sorted[j]) >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// Four containers calling one connection as fast as they can, the limit
// scaled down in time (6,000 a minute: the same rule as 60 a minute, a
// hundred times faster): the slots they are given hold no more than a
// hundredth of the limit in any window of a hundredth of a minute, no call
// goes before its slot, and every call gets one.
func TestFourContainersNeverExceedTheConnectionsCallsPerMinute(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	conn := pace.Connection{ID: f.NewID(t), OrganizationID: f.NewID(t)}
	const (
		perMinute = 6000
		calls     = 300
		window    = time.Minute / 100 // 600 ms
		perWindow = perMinute / 100   // 60
	)
	var (
		mu    sync.Mutex
		slots []time.Time
		wg    sync.WaitGroup
	)
	for _, p := range containers(t, f.URL, 4) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				done := len(slots) >= calls
				mu.Unlock()
				if done {
					return
				}
				slot, err := p.Reserve(context.Background(), conn, perMinute, 5*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Until(slot))
				if called := time.Now(); called.Before(slot) {
					t.Errorf("a call at %v, before its slot at %v", called, slot)
				}
				mu.Lock()
				slots = append(slots, slot)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(slots, func(a, b time.Time) int { return a.Compare(b) })
	if len(slots) < calls {
		t.Fatalf("%d calls made, want %d", len(slots), calls)
	}
	if got := maxInWindow(slots, window); got > perWindow {
		t.Errorf("%d slots in one window of %v, the limit allows %d", got, window, perWindow)
	}
	for i := 1; i < len(slots); i++ {
		if gap := slots[i].Sub(slots[i-1]); gap < time.Minute/perMinute-time.Microsecond {
			t.Fatalf("slots %d and %d are %v apart, less than the limit's %v", i-1, i, gap, time.Minute/perMinute)
		}
	}
}

// A slot further off than the caller can wait is not taken: the caller is
// told when to come back, and the slots stay for others.
func TestASlotTooFarOffIsNotTaken(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	conn := pace.Connection{ID: f.NewID(t), OrganizationID: f.NewID(t)}
	p := pace.NewPacer(f.Pool)
	ctx := context.Background()
	if err := p.Wait(ctx, conn, 1, time.Second); err != nil { // one a minute: the next slot is a minute off
		t.Fatal(err)
	}
	start := time.Now()
	err := p.Wait(ctx, conn, 1, time.Second)
	var busy *pace.Busy
	if !errors.As(err, &busy) || busy.Paused {
		t.Fatalf("a second call within the minute: %v, want a *Busy that is not a pause", err)
	}
	if d := busy.Until.Sub(start); d < 55*time.Second || d > 61*time.Second {
		t.Errorf("told to come back in %v, want about a minute", d)
	}
	var next time.Time
	if err := f.Pool.QueryRow(ctx, `select next_call_at from integration_outbox_connection_pace where connection_id = $1`, conn.ID).Scan(&next); err != nil {
		t.Fatal(err)
	}
	if !next.Equal(busy.Until) {
		t.Errorf("the refused call moved next_call_at to %v, want it left at %v", next, busy.Until)
	}
}

// A 429 in one container pauses the connection for every container until the
// provider's Retry-After: each is told so at once, and calls go on after it.
func TestAPauseStopsEveryContainersCallsUntilItEnds(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	conn := pace.Connection{ID: f.NewID(t), OrganizationID: f.NewID(t)}
	ps := containers(t, f.URL, 4)
	ctx := context.Background()
	until := time.Now().Add(1500 * time.Millisecond)
	if err := ps[0].Pause(ctx, conn, until, "429 Too Many Requests (X-Rate-Limit-Problem: minute)"); err != nil {
		t.Fatal(err)
	}
	// A shorter pause later does not cut the running one.
	if err := ps[1].Pause(ctx, conn, time.Now().Add(100*time.Millisecond), "shorter"); err != nil {
		t.Fatal(err)
	}
	for i, p := range ps {
		for _, perMinute := range []int{0, 6000} {
			err := p.Wait(ctx, conn, perMinute, 200*time.Millisecond)
			var busy *pace.Busy
			if !errors.As(err, &busy) || !busy.Paused || busy.Until.Before(until.Add(-time.Millisecond)) {
				t.Fatalf("container %d (%d a minute) during the pause: %v, want a pause until %v", i, perMinute, err, until)
			}
			if busy.Reason != "429 Too Many Requests (X-Rate-Limit-Problem: minute)" {
				t.Errorf("the pause says %q", busy.Reason)
			}
		}
	}
	// A caller that can wait past the pause gets the first slot after it.
	if err := ps[2].Wait(ctx, conn, 6000, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if now := time.Now(); now.Before(until) {
		t.Errorf("a call slot at %v, before the pause ends at %v", now, until)
	}
	if err := ps[3].Wait(ctx, conn, 0, 0); err != nil {
		t.Errorf("after the pause: %v", err)
	}
}

// A caller asleep to a slot it took before another container's 429 paused
// the connection does not call inside the pause: after its sleep it finds
// the pause covering its slot and gets the pause's *Busy. A slot taken
// after the pause (its end, or later) is not stopped by it.
func TestASlotTakenBeforeAPauseDoesNotCallInsideIt(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	conn := pace.Connection{ID: f.NewID(t), OrganizationID: f.NewID(t)}
	ps := containers(t, f.URL, 2)
	ctx := context.Background()
	// 120 a minute: the first call now, the second one half a second later.
	if err := ps[0].Wait(ctx, conn, 120, time.Second); err != nil {
		t.Fatal(err)
	}
	slot, err := ps[1].Reserve(ctx, conn, 120, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- ps[1].Wait(ctx, conn, 120, time.Second) }() // the third slot, a second off
	// The first call's answer: a 429 pausing the connection for 30 s.
	until := time.Now().Add(30 * time.Second)
	if err := ps[0].Pause(ctx, conn, until, "429 (X-Rate-Limit-Problem: minute)"); err != nil {
		t.Fatal(err)
	}
	err = <-waited
	var busy *pace.Busy
	if !errors.As(err, &busy) || !busy.Paused || busy.Until.Before(until.Add(-time.Millisecond)) {
		t.Fatalf("a slot taken before the pause, reached inside it: %v; want the pause's Busy until %v", err, until)
	}
	if !slot.Before(until) {
		t.Fatalf("the second slot %v is not inside the pause ending %v", slot, until)
	}

	// After a pause that has ended, a slot taken at its end calls.
	g := pg.NewDB(t)
	conn2 := pace.Connection{ID: g.NewID(t), OrganizationID: g.NewID(t)}
	qs := containers(t, g.URL, 1)
	if err := qs[0].Pause(ctx, conn2, time.Now().Add(300*time.Millisecond), "429"); err != nil {
		t.Fatal(err)
	}
	if err := qs[0].Wait(ctx, conn2, 120, time.Second); err != nil {
		t.Errorf("a slot at the end of the pause: %v, want the call to go", err)
	}
}
