package rerun_test

import (
	"context"
	"testing"

	"integration-outbox/internal/rerun"
)

// enableConnection is tenant-scoped and audited: another organization's
// connection (or one that does not exist) is answered as skipped,
// "connection not found" (not a function error: an operator's typo must
// not trip the Errors alarm), with no enabledConnection, and changes
// nothing but its audit row; a disabled connection of the organization is
// enabled, its held rows due at once, with one audit row carrying the
// payload; a connection that was not disabled is answered wasDisabled
// false, audited too.
func TestEnableConnectionIsTenantScopedAndAudited(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	held := b.row(t, "failed", 3)
	b.exec(t, `update external_integration_outbox set next_attempt_at = now() + interval '2 hours' where id = $1`, held)
	b.exec(t, `insert into integration_outbox_connection_state (connection_id, organization_id, provider, failing_since,
		last_failure_at, disabled_at, disabled_reason) values ($1, $2, 'sandbox', now() - interval '6 days', now(), now(), 'every call failed')`,
		b.conn, b.org)
	// Everything but the audit rows.
	state := func() string {
		t.Helper()
		var sum string
		if err := b.f.Pool.QueryRow(ctx, `select md5(
			coalesce((select string_agg(t::text, '|' order by t.id) from external_integration_outbox t), '') || '#' ||
			coalesce((select string_agg(t::text, '|' order by t.id) from external_integration_conflicts t), '') || '#' ||
			coalesce((select string_agg(t::text, '|' order by t.connection_id) from integration_outbox_connection_state t), ''))`).
			Scan(&sum); err != nil {
			t.Fatal(err)
		}
		return sum
	}
	before := state()

	other := b.f.NewID(t)
	for _, org := range []string{other, b.org} {
		conn := b.conn
		if org == b.org {
			conn = b.f.NewID(t) // no such connection
		}
		payload := map[string]any{"organizationId": org, "enableConnection": conn, "reason": "fixed"}
		res, err := b.r.Handle(ctx, b.payload(t, payload))
		if err != nil {
			t.Fatalf("enableConnection of a connection the organization does not have: %v, want an answer", err)
		}
		if res.EnabledConnection != nil || len(res.Requeued) != 0 || len(res.Skipped) != 1 ||
			res.Skipped[0].ID != conn || res.Skipped[0].Reason != rerun.ReasonConnectionNotFound {
			t.Errorf("enableConnection of a connection the organization does not have: %+v, want it skipped, %q",
				res, rerun.ReasonConnectionNotFound)
		}
	}
	if state() != before {
		t.Fatal("an enableConnection of a connection not found changed the database")
	}
	if n := b.audits(t); n != 2 {
		t.Errorf("%d audit rows of the two enables of a connection not found, want 2", n)
	}

	res := b.handle(t, map[string]any{"enableConnection": b.conn, "requestedBy": "ops"})
	e := res.EnabledConnection
	if e == nil || !e.WasDisabled || e.DisabledAt == nil || e.MadeDue != 1 || e.ConnectionID != b.conn {
		t.Fatalf("enabledConnection %+v, want it enabled with its one held row made due", e)
	}
	if n := b.f.Count(t, `select count(*) from integration_outbox_connection_state
		where connection_id = $1 and disabled_at is null and enabled_at is not null and failing_since is not null`, b.conn); n != 1 {
		t.Error("the connection is not enabled (or lost its failing_since)")
	}
	if r := b.f.Row(t, held); r.RetryInSeconds == nil || *r.RetryInSeconds > 0 || r.AttemptCount != 3 {
		t.Errorf("held row: due in %v s with %d attempts, want due now with its 3", r.RetryInSeconds, r.AttemptCount)
	}
	if n := b.f.Count(t, `select count(*) from external_integration_rerun_audit where organization_id = $1
		and requested_by = 'ops' and reason = 'provider fixed' and payload ->> 'enableConnection' = $2`, b.org, b.conn); n != 1 {
		t.Errorf("%d audit rows of the enable, want 1", n)
	}

	again := b.handle(t, map[string]any{"enableConnection": b.conn})
	if again.EnabledConnection == nil || again.EnabledConnection.WasDisabled || b.audits(t) != 4 {
		t.Errorf("a second enable: %+v, %d audit rows; want wasDisabled false, audited", again.EnabledConnection, b.audits(t))
	}
}
