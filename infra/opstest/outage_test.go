package opstest

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
)

// A provider outage, replayed through the real dispatch and push functions:
// the webhook provider answers 200 for three alarm periods, then 503 for
// good. Each simulated period (the alarms' 300 s) new orders arrive and the
// failed rows whose backoff has elapsed come due again; the EMF the
// functions write in a period is that period's metric data, and the
// template's alarms are evaluated over it. The failure-ratio alarm fires
// two periods into the outage (the first has fewer than 5 pushes); the
// dead-letter alarm only once the first rows have used up MAX_ATTEMPTS (10)
// through exponential backoff: 15 periods (75 minutes) into it when this
// was written.
func TestProviderOutageTripsTheCircuitAlarmFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const period = 300.0 // seconds, the alarms' Period
	const healthy, newPerPeriod, maxPeriods = 3, 3, 60
	tp := loadTemplate(t)
	alarms := alarmDefs(t, tp)
	circuit, deadLetter := alarms["WebhookCircuitOpenedAlarm"], alarms["WebhookDeadLetteredAlarm"]
	if circuit.datapoint == nil || deadLetter.datapoint == nil {
		t.Fatal("template lacks WebhookCircuitOpenedAlarm or WebhookDeadLetteredAlarm")
	}

	var down atomic.Bool
	p := newPipeline(t)
	conn := p.webhook(t, provider(t, func() int {
		if down.Load() {
			return 503
		}
		return 200
	}).URL)

	dueAt := map[int][]string{} // simulated period → failed rows due again
	var rows []string
	var periods []periodData
	firstFired := map[string]int{}
	for k := 0; k < maxPeriods; k++ {
		down.Store(k >= healthy)
		if due := dueAt[k]; len(due) > 0 {
			if _, err := p.f.Pool.Exec(ctx, `update external_integration_outbox set next_attempt_at = now() where id = any($1)`, due); err != nil {
				t.Fatal(err)
			}
		}
		// Simulated time passes for the circuit breakers too: an open
		// circuit's cooldown runs down by one period per period.
		if _, err := p.f.Pool.Exec(ctx, `update integration_outbox_connection_health
			set open_until = open_until - make_interval(secs => $1) where open_until is not null`, period); err != nil {
			t.Fatal(err)
		}
		for range newPerPeriod {
			rows = append(rows, p.command(t, conn))
		}
		before := len(p.out.String())
		p.tick(t)
		periods = append(periods, sumPeriod(emfLines(t, []byte(p.out.String()[before:]))))
		for _, id := range rows {
			r := p.f.Row(t, id)
			if r.Status == "failed" && r.RetryInSeconds != nil && *r.RetryInSeconds > 0 {
				next := k + int(math.Ceil(*r.RetryInSeconds/period))
				if !containsID(dueAt[next], id) {
					dueAt[next] = append(dueAt[next], id)
				}
			}
		}
		key := func(m string) float64 {
			return periods[k][seriesKey("IntegrationOutbox", m, map[string]string{"Function": "push-purchase-order", "Provider": "webhook"})]
		}
		t.Logf("period %d: completed %v failed %v dead-lettered %v", k, key("Completed"), key("Failed"), key("DeadLettered"))
		for id, a := range alarms {
			if _, done := firstFired[id]; !done {
				if at := a.firesAt(periods); at >= 0 {
					firstFired[id] = at
				}
			}
		}
		if k >= healthy+6 { // long enough for every alarm that reacts to the outage
			break
		}
	}
	// With the circuit breaker (on by default) the broken connection gets a
	// handful of calls, then one probe per cooldown: too few pushes for the
	// failure-ratio alarm's minimum, and no attempts used up, so no dead
	// letters. The alarm that fires is the circuit's, as soon as it opens.
	c, ok := firstFired["WebhookCircuitOpenedAlarm"]
	t.Logf("outage from period %d; alarms in ALARM at period: %v", healthy, firstFired)
	if !ok {
		t.Fatalf("alarms fired %v: want WebhookCircuitOpenedAlarm", firstFired)
	}
	if c < healthy || c > healthy+2 {
		t.Errorf("circuit alarm fired at period %d, want within 2 periods of the outage (%d)", c, healthy)
	}
	for id, at := range firstFired {
		if at < c {
			t.Errorf("%s fired at %d, before the circuit alarm (%d)", id, at, c)
		}
	}
	if d, ok := firstFired["WebhookDeadLetteredAlarm"]; ok && d <= c {
		t.Errorf("dead-letter alarm fired at %d, not after the circuit alarm (%d)", d, c)
	}
}

func containsID(ids []string, id string) bool {
	for _, e := range ids {
		if e == id {
			return true
		}
	}
	return false
}
