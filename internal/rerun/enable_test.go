package rerun_test

import (
	"context"
	"testing"
)

// enableConnection is tenant-scoped and audited: another organization's
// connection (or one that does not exist) is refused naming the field and
// changes nothing; a disabled connection of the organization is enabled,
// its held rows due at once, with one audit row carrying the payload; a
// connection that was not disabled is answered wasDisabled false, audited
// too.
func TestEnableConnectionIsTenantScopedAndAudited(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	held := b.row(t, "failed", 3)
	b.exec(t, `update external_integration_outbox set next_attempt_at = now() + interval '2 hours' where id = $1`, held)
	b.exec(t, `insert into integration_outbox_connection_state (connection_id, organization_id, provider, failing_since,
		last_failure_at, disabled_at, disabled_reason) values ($1, $2, 'sandbox', now() - interval '6 days', now(), now(), 'every call failed')`,
		b.conn, b.org)
	before := b.checksum(t)

	other := b.f.NewID(t)
	for _, org := range []string{other, b.org} {
		conn := b.conn
		if org == b.org {
			conn = b.f.NewID(t) // no such connection
		}
		payload := map[string]any{"organizationId": org, "enableConnection": conn, "reason": "fixed"}
		_, err := b.r.Handle(ctx, b.payload(t, payload))
		checkPayloadError(t, err, "enableConnection")
	}
	if b.checksum(t) != before || b.audits(t) != 0 {
		t.Fatal("a refused enableConnection changed the database")
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
	if again.EnabledConnection == nil || again.EnabledConnection.WasDisabled || b.audits(t) != 2 {
		t.Errorf("a second enable: %+v, %d audit rows; want wasDisabled false, audited", again.EnabledConnection, b.audits(t))
	}
}
