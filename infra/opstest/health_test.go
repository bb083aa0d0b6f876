package opstest

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
)

// A connection disabled after failing for CONNECTION_DISABLE_AFTER, replayed
// through the real dispatch and push functions: the ConnectionsHeldAlarm
// fires in the period of the first dispatch run after the disable (the run
// counts the held connections) and clears once the connection is enabled
// again through the rerun function and delivers. Five days of failures are
// simulated by moving the connection's failing_since back.
func TestADisabledConnectionFiresTheConnectionsHeldAlarmUntilEnabled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	alarm, ok := alarmDefs(t, loadTemplate(t))["ConnectionsHeldAlarm"]
	if !ok || alarm.datapoint == nil {
		t.Fatal("template lacks ConnectionsHeldAlarm")
	}
	var down atomic.Bool
	down.Store(true)
	p := newPipeline(t)
	conn := p.webhook(t, provider(t, func() int {
		if down.Load() {
			return 503
		}
		return 200
	}).URL)
	row := p.command(t, conn)

	var periods []periodData
	tick := func() {
		before := len(p.out.String())
		p.tick(t)
		periods = append(periods, sumPeriod(emfLines(t, []byte(p.out.String()[before:]))))
	}
	due := func() {
		if _, err := p.f.Pool.Exec(ctx, `update external_integration_outbox set next_attempt_at = now() where id = $1 and status = 'failed'`, row); err != nil {
			t.Fatal(err)
		}
	}
	tick() // fails: the failing period starts
	if _, err := p.f.Pool.Exec(ctx, `update integration_outbox_connection_state
		set failing_since = failing_since - interval '6 days' where connection_id = $1`, conn); err != nil {
		t.Fatal(err)
	}
	due()
	tick() // fails again, six days on: disabled
	if at := alarm.firesAt(periods); at >= 0 {
		t.Fatalf("fired at period %d, before any run counted the disabled connection", at)
	}
	due()
	tick() // the run counts it; the row is held
	if at := alarm.firesAt(periods); at != 2 {
		t.Fatalf("ConnectionsHeldAlarm fired at period %d, want 2 (the first run after the disable)", at)
	}
	if r := p.f.Row(t, row); r.Status != "failed" || r.AttemptCount != 2 {
		t.Fatalf("the held row is %s with %d attempts, want failed with its 2", r.Status, r.AttemptCount)
	}

	down.Store(false)
	rr, err := p.app.Rerunner(p.app.SQS())
	if err != nil {
		t.Fatal(err)
	}
	req, _ := json.Marshal(map[string]any{"organizationId": p.org, "enableConnection": conn, "reason": "opstest"})
	if _, err := rr.Handle(ctx, req); err != nil {
		t.Fatal(err)
	}
	tick() // delivers
	tick() // counts nothing held
	if r := p.f.Row(t, row); r.Status != "completed" {
		t.Fatalf("row %s after the enable, want completed", r.Status)
	}
	if v := alarm.datapoint(periods[len(periods)-1]); v != 0 {
		t.Errorf("the alarm's datapoint is %v once the connection delivers again, want 0", v)
	}
}
