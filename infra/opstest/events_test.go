package opstest

import (
	"encoding/json"
	"testing"

	"integration-outbox/internal/event"
	"integration-outbox/internal/testenv"
)

// Through the functions' real composition with EVENT_BUS_NAME set: the push
// function records a command's failing attempt (COMMAND_FAILING_AFTER_ATTEMPTS
// 1 here) with its event, and the next dispatch run publishes it to the bus,
// where a rule delivers it once; the run's EMF counts it. Without
// EVENT_BUS_NAME nothing is recorded.
func TestFunctionsRecordAndPublishEventsToTheBus(t *testing.T) {
	t.Parallel()
	bus := testenv.NewEventBus(t, moto, event.Source)
	p := newPipelineWith(t, map[string]string{"EVENT_BUS_NAME": bus.Name, "COMMAND_FAILING_AFTER_ATTEMPTS": "1"})
	conn := p.webhook(t, provider(t, func() int { return 503 }).URL)
	row := p.command(t, conn)
	p.tick(t) // dispatch, then the push records the failure and its event
	before := len(p.out.String())
	p.tick(t) // the next dispatch run publishes it (the row is not due yet)
	got := bus.Drain(t)
	if len(got) != 1 || got[0].DetailType != event.CommandFailing || got[0].Source != event.Source {
		t.Fatalf("delivered %+v, want one Command Failing", got)
	}
	var d map[string]any
	if err := json.Unmarshal(got[0].Detail, &d); err != nil {
		t.Fatal(err)
	}
	if d["outboxId"] != row || d["connectionId"] != conn || d["organizationId"] != p.org || d["provider"] != "webhook" ||
		d["attempt"] != 1.0 || d["lastError"] == nil || d["eventId"] == nil || d["occurredAt"] == nil {
		t.Errorf("detail %v", d)
	}
	published := 0.0
	for _, l := range emfLines(t, []byte(p.out.String()[before:])) {
		for _, v := range l.Values["EventsPublished"] {
			published += v
		}
	}
	if published != 1 {
		t.Errorf("EventsPublished %v in the second run, want 1", published)
	}

	off := newPipeline(t)
	offConn := off.webhook(t, provider(t, func() int { return 503 }).URL)
	off.command(t, offConn)
	off.tick(t)
	if n := off.f.Count(t, `select count(*) from integration_outbox_events`); n != 0 {
		t.Errorf("%d events recorded without EVENT_BUS_NAME", n)
	}
}
