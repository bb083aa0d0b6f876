package inspect

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"integration-outbox/internal/testenv"
)

// A purchase order waiting for its supplier's push says so: which row it
// waits for, and that no attempt is used. Once it no longer waits (any
// other status), it says nothing of it.
func TestInspectShowsWhatACommandWaitsFor(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	ctx := context.Background()
	org := f.NewID(t)
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org})
	supplier := f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, CommandType: "push_supplier",
		EntityID: f.NewID(t), Payload: map[string]any{"name": "S"}})
	order := f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, EntityID: f.PurchaseOrder(t, org, "", 1),
		Status: "failed", Payload: map[string]any{"supplierId": "s"}})
	if _, err := f.Pool.Exec(ctx, `update external_integration_outbox set waiting_for_outbox_id = $1 where id = $2`, supplier, order); err != nil {
		t.Fatal(err)
	}
	i := New(f.Pool, Config{Logger: slog.New(slog.DiscardHandler)})
	ask := func() Response {
		t.Helper()
		r, err := i.Handle(ctx, json.RawMessage(`{"organizationId":"`+org+`","outboxId":"`+order+`"}`))
		if err != nil || !r.Found {
			t.Fatalf("inspect: %+v, %v", r, err)
		}
		return r
	}
	if r := ask(); r.WaitingFor != supplier || !strings.Contains(r.Message, "waiting for "+supplier) ||
		!strings.Contains(r.Message, "no attempt used") {
		t.Errorf("waiting order: waitingFor %q, message %q", r.WaitingFor, r.Message)
	}
	if _, err := f.Pool.Exec(ctx, `update external_integration_outbox set status = 'completed' where id = $1`, order); err != nil {
		t.Fatal(err)
	}
	if r := ask(); r.WaitingFor != "" || strings.Contains(r.Message, "waiting for") {
		t.Errorf("completed order: waitingFor %q, message %q", r.WaitingFor, r.Message)
	}
}
