package lambdatest_test

import (
	"strings"
	"testing"
)

type retentionResult struct {
	Enabled bool `json:"enabled"`
	Deleted int  `json:"deleted"`
	Batches int  `json:"batches"`
	More    bool `json:"more"`
}

func TestRIERetentionFunction(t *testing.T) {
	const folder, logicalID = "retention", "RetentionFunction"
	requireLogicalID(t, folder, logicalID)
	bin := bootstrap(t, folder)
	s := newStack(t, folder)
	env := functionEnv(s.DatabaseURL, "")
	delete(env, "PUSH_PURCHASE_ORDER_QUEUE_URL")

	// Off unless configured: every sample event answers on an empty migrated
	// database and deletes nothing, even a row that would be due.
	off := startEmulator(t, logicalID+"-off", bin, env)
	for i, ev := range events(t, folder) {
		t.Run("off/"+ev.Name, func(t *testing.T) {
			s.reset(t)
			inv := off.invoke(t, ev.Payload)
			if i == 0 {
				logFirstInvoke(t, off, bin, ev.Name)
			}
			if msg := inv.FunctionError(); msg != "" {
				t.Fatalf("function error: %s", msg)
			}
			var got retentionResult
			decodeStrict(t, inv.Body, &got, "enabled", "deleted", "batches", "more")
			if got.Enabled || got.Deleted != 0 {
				t.Errorf("without RETENTION_AGE: %s", inv.Body)
			}
		})
	}

	env["RETENTION_AGE"] = "720h"
	on := startEmulator(t, logicalID, bin, env)
	for _, ev := range events(t, folder) {
		t.Run("on/"+ev.Name, func(t *testing.T) {
			s.reset(t)
			s.seedRerun(t)
			// Acme's completed row finished 40 days ago; the others are in
			// states retention never deletes.
			s.exec(t, `update external_integration_outbox set completed_at = now() - interval '40 days' where id = $1`, rerunCompleted)
			s.exec(t, `insert into external_integration_attempts (outbox_id, organization_id, attempt, outcome)
				values ($1, $2, 1, 'completed')`, rerunCompleted, orgA)
			before := s.state(t)
			inv := on.invoke(t, ev.Payload)
			if msg := inv.FunctionError(); msg != "" {
				t.Fatalf("function error: %s", msg)
			}
			var got retentionResult
			decodeStrict(t, inv.Body, &got, "enabled", "deleted", "batches", "more")
			if !got.Enabled || got.Deleted != 1 {
				t.Errorf("with RETENTION_AGE=720h: %s, want the old completed row deleted", inv.Body)
			}
			after := s.state(t)
			if _, ok := after.Outbox[rerunCompleted]; ok {
				t.Errorf("the completed row is still there")
			}
			if n := s.count(t, `select count(*) from external_integration_attempts`); n != 0 {
				t.Errorf("%d attempts left of the deleted row", n)
			}
			if diffs := diffOutside(before, after, []string{rerunCompleted}); len(diffs) > 0 {
				t.Errorf("retention changed other rows:\n%s", strings.Join(diffs, "\n"))
			}
			if len(after.Conflicts) != len(before.Conflicts) || len(after.Audits) != len(before.Audits) {
				t.Errorf("conflicts or audits deleted")
			}
		})
	}
}
