package opstest

import (
	"encoding/json"
	"testing"

	"integration-outbox/internal/event"
	"integration-outbox/internal/testenv"
)

// Through the functions' real composition with EVENT_BUS_NAME set: the push
// function records a command's failing attempt (COMMAND_FAILING_AFTER_ATTEMPTS
// 1 here) with its event and publishes it right after, to the bus, where a
// rule delivers it once; the next dispatch run has nothing left to publish
// (its EMF counts 0) and sends it no second time. Without EVENT_BUS_NAME
// nothing is recorded.
func TestFunctionsRecordAndPublishEventsToTheBus(t *testing.T) {
	t.Parallel()
	bus := testenv.NewEventBus(t, moto, event.Source)
	p := newPipelineWith(t, map[string]string{"EVENT_BUS_NAME": bus.Name, "COMMAND_FAILING_AFTER_ATTEMPTS": "1"})
	conn := p.webhook(t, provider(t, func() int { return 503 }).URL)
	row := p.command(t, conn)
	p.tick(t) // dispatch, then the push records the failure and its event, and publishes it
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
	before := len(p.out.String())
	p.tick(t) // the next dispatch run: nothing left to publish (the row is not due yet)
	published := 0.0
	for _, l := range emfLines(t, []byte(p.out.String()[before:])) {
		for _, v := range l.Values["EventsPublished"] {
			published += v
		}
	}
	if again := bus.Drain(t); published != 0 || len(again) != 0 {
		t.Errorf("the second run published %v events (%d delivered), want none: the push published it", published, len(again))
	}

	off := newPipeline(t)
	offConn := off.webhook(t, provider(t, func() int { return 503 }).URL)
	off.command(t, offConn)
	off.tick(t)
	if n := off.f.Count(t, `select count(*) from integration_outbox_events`); n != 0 {
		t.Errorf("%d events recorded without EVENT_BUS_NAME", n)
	}
}
