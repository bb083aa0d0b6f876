package dispatch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

// A run that sent a command of a Prerequisites type looks once more, and
// keeps claiming every RoomWait only while a row waits for it: with nobody
// waiting it ends after one look; with a row waiting (and the push never
// consumed here) it keeps looking until its time budget.
func TestARunWaitsForAPrerequisiteOnlyWhileARowWaitsForIt(t *testing.T) {
	t.Parallel()
	for _, waiting := range []bool{false, true} {
		t.Run(map[bool]string{false: "nobody waits", true: "an order waits"}[waiting], func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			supplier := b.commands(t, 1, testenv.CommandOpts{CommandType: "push_supplier", Payload: map[string]any{"name": "S"}})[0]
			if waiting {
				later := time.Now().Add(time.Hour)
				order := b.commands(t, 1, testenv.CommandOpts{Status: "failed", NextAttemptAt: &later})[0]
				if _, err := b.f.Pool.Exec(ctx, `update external_integration_outbox set waiting_for_outbox_id = $1 where id = $2`,
					supplier, order); err != nil {
					t.Fatal(err)
				}
			}
			var logs bytes.Buffer
			d, err := dispatch.New(outbox.NewStore(b.f.Pool), b.sqs, dispatch.Config{
				Routes:    dispatch.Routes{"push_purchase_order": b.queue, "push_supplier": b.queue},
				BatchSize: 50, MaxPerRun: 5000, MaxAttempts: 10, Lease: 15 * time.Minute,
				RoomWait: 20 * time.Millisecond, Reserve: time.Second, Prerequisites: []string{"push_supplier"},
				Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			if s, err := d.Handle(rctx, json.RawMessage(`{}`)); err != nil || s.Dispatched != 1 {
				t.Fatalf("run %+v, %v; want the supplier's push sent", s, err)
			}
			var summary struct {
				EntityWaits int `json:"entityWaits"`
			}
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, `"dispatch run finished"`) {
					json.Unmarshal([]byte(line), &summary)
				}
			}
			switch {
			case !waiting && summary.EntityWaits != 1:
				t.Errorf("nobody waiting: the run waited %d times, want one look", summary.EntityWaits)
			case waiting && summary.EntityWaits < 10:
				t.Errorf("an order waiting: the run waited %d times, want it to keep looking while the push is in flight", summary.EntityWaits)
			}
		})
	}
}
