package inspect

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"integration-outbox/internal/testenv"
)

// A command that per-entity order holds back says what it waits behind,
// and the stuck view counts the entities whose first command has waited
// over an hour with others behind it.
func TestInspectShowsWhatACommandWaitsBehindAndEntitiesWaiting(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	ctx := context.Background()
	org := f.NewID(t)
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	po := f.PurchaseOrder(t, org, "", 1)
	old := time.Now().Add(-2 * time.Hour)
	past := time.Now().Add(-time.Hour)
	head := f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, EntityID: po, CreatedAt: old,
		Status: "failed", AttemptCount: 2, NextAttemptAt: &past})
	next := f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, EntityID: po, CreatedAt: old.Add(time.Second)})
	last := f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, EntityID: po, CreatedAt: old.Add(2 * time.Second)})
	// A fresh entity with two commands: not an hour old, not counted.
	fresh := f.PurchaseOrder(t, org, "", 1)
	f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, EntityID: fresh})
	f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, EntityID: fresh})
	// On a connection that opted out nothing waits.
	free := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Config: map[string]any{"ordered": false}})
	f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: free, EntityID: po, CreatedAt: old})
	loose := f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: free, EntityID: po, CreatedAt: old.Add(time.Second)})

	i := New(f.Pool, Config{Logger: slog.New(slog.DiscardHandler)})
	ask := func(id string) Response {
		t.Helper()
		r, err := i.Handle(ctx, json.RawMessage(`{"organizationId":"`+org+`","outboxId":"`+id+`"}`))
		if err != nil || !r.Found {
			t.Fatalf("inspect %s: %+v, %v", id, r, err)
		}
		return r
	}
	for _, id := range []string{next, last} {
		r := ask(id)
		if r.WaitingBehind != head || !strings.Contains(r.Message, "waiting behind "+head) {
			t.Errorf("row %s: waitingBehind %q, message %q; want waiting behind %s", id, r.WaitingBehind, r.Message, head)
		}
	}
	// The head in flight: the others wait behind it, and it behind nothing.
	if _, err := f.Pool.Exec(ctx, `update external_integration_outbox set status = 'processing',
		lease_expires_at = now() + interval '5 minutes', next_attempt_at = null where id = $1`, head); err != nil {
		t.Fatal(err)
	}
	if r := ask(head); r.WaitingBehind != "" || r.Message != "" {
		t.Errorf("the head: waitingBehind %q, message %q; want nothing", r.WaitingBehind, r.Message)
	}
	if r := ask(loose); r.WaitingBehind != "" {
		t.Errorf("a command of an unordered connection waits behind %q, want nothing", r.WaitingBehind)
	}

	s, err := i.Handle(ctx, json.RawMessage(`{"organizationId":"`+org+`","stuck":true}`))
	if err != nil {
		t.Fatal(err)
	}
	w := s.Stuck.EntitiesWaiting
	if w.Total != 1 || len(w.Entities) != 1 {
		t.Fatalf("entitiesWaiting %+v, want the one entity whose head waited over an hour", w)
	}
	if e := w.Entities[0]; e.EntityID != po || e.EntityType != "purchase_order" || e.Behind != 2 || e.Head.ID != head {
		t.Errorf("entity %+v, want %s with 2 behind head %s", e, po, head)
	}
	// Another organization sees none of it.
	other, err := i.Handle(ctx, json.RawMessage(`{"organizationId":"`+f.NewID(t)+`","stuck":true}`))
	if err != nil || other.Stuck.EntitiesWaiting.Total != 0 {
		t.Errorf("another organization's stuck view: %+v, %v", other.Stuck.EntitiesWaiting, err)
	}
}

// Of two accepted commands of one entity the newer one's follow-up waits
// behind the older one, which waits behind nothing; a queued command waits
// behind the older accepted one, the first in flight.
func TestInspectShowsWhatAnAcceptedCommandWaitsBehind(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	ctx := context.Background()
	org := f.NewID(t)
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	po := f.PurchaseOrder(t, org, "", 1)
	base := time.Now().Add(-time.Hour)
	var ids []string
	for n := range 3 {
		ids = append(ids, f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, EntityID: po,
			CreatedAt: base.Add(time.Duration(n) * time.Second)}))
	}
	if _, err := f.Pool.Exec(ctx, `update external_integration_outbox set status = 'processing', provider_status = 'accepted',
		next_attempt_at = now() + interval '1 hour', attempt_count = 1 where id = any($1::text[]::uuid[])`, ids[:2]); err != nil {
		t.Fatal(err)
	}
	i := New(f.Pool, Config{Logger: slog.New(slog.DiscardHandler)})
	for n, want := range []string{"", ids[0], ids[0]} {
		r, err := i.Handle(ctx, json.RawMessage(`{"organizationId":"`+org+`","outboxId":"`+ids[n]+`"}`))
		if err != nil || !r.Found {
			t.Fatalf("inspect %s: %+v, %v", ids[n], r, err)
		}
		if r.WaitingBehind != want {
			t.Errorf("command %d: waiting behind %q, want %q", n, r.WaitingBehind, want)
		}
	}
}
