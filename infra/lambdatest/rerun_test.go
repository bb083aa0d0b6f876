package lambdatest_test

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// seedRerun: Acme's rows in each state a rerun meets, created in November
// 2026 as the sample filters expect, and a dead-lettered row of Globex.
func (s *stack) seedRerun(t *testing.T) {
	t.Helper()
	s.seedConnections(t, "integrations/acme-webhook", "https://erp.acme.example/api/purchase-orders")
	rows := []struct {
		id, org, conn, status string
		attempts              int
		extra                 string // more columns, SQL
		created               string
	}{
		{rerunDeadLetter, orgA, connA, "dead_letter", 10, "last_error = 'provider answered 422: unknown supplier'", "2026-11-20T09:00:00Z"},
		{rerunFailed, orgA, connA, "failed", 3, "last_error = 'provider answered 503', next_attempt_at = now() + interval '10 minutes'", "2026-11-20T09:05:00Z"},
		{rerunCompleted, orgA, connA, "completed", 1, "completed_at = now(), provider_reference = 'ACME-PO-77'", "2026-11-20T09:10:00Z"},
		{rerunUncertain, orgA, connA, "uncertain", 1, "provider_status = 'uncertain'", "2026-11-20T09:15:00Z"},
		{rerunOtherOrg, orgB, connB, "dead_letter", 10, "last_error = 'sandbox rejected the order'", "2026-11-20T09:20:00Z"},
	}
	for _, r := range rows {
		s.exec(t, `insert into external_integration_outbox (id, organization_id, integration_connection_id, provider,
				command_type, local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count, created_at)
			values ($1, $2, $3, 'webhook', 'push_purchase_order', 'purchase_order', gen_random_uuid(),
				'{"externalSupplierId": "SUP-ACME-001"}', $7, $4, $5, $6)`,
			r.id, r.org, r.conn, r.status, r.attempts, ts(r.created), "rerun-"+r.id)
		s.exec(t, `update external_integration_outbox set `+r.extra+` where id = $1`, r.id)
	}
	for _, r := range []struct{ id, org, conn string }{{rerunDeadLetter, orgA, connA}, {rerunOtherOrg, orgB, connB}} {
		s.exec(t, `insert into external_integration_conflicts (organization_id, integration_connection_id, conflict_type,
				severity, local_entity_type, summary, status, outbox_id)
			values ($1, $2, 'provider_rejected', 'high', 'purchase_order', 'the provider rejected the order', 'open', $3)`,
			r.org, r.conn, r.id)
	}
}

type rerunResult struct {
	DryRun   bool     `json:"dryRun"`
	Matched  int      `json:"matched"`
	Requeued []string `json:"requeued"`
	Skipped  []struct {
		ID     string `json:"id"`
		Reason string `json:"reason"`
	} `json:"skipped"`
	Dispatched int `json:"dispatched"`
	// EnabledConnection answers an enableConnection payload only.
	EnabledConnection *struct {
		ConnectionID string     `json:"connectionId"`
		WasDisabled  bool       `json:"wasDisabled"`
		DisabledAt   *time.Time `json:"disabledAt"`
		MadeDue      int        `json:"madeDue"`
	} `json:"enabledConnection"`
}

// rerunWant is what one sample event must do to the seeded rows.
type rerunWant struct {
	dryRun     bool
	matched    int
	requeued   []string // in this order
	skipped    []string
	dispatched int
}

var rerunWants = map[string]rerunWant{
	// dead_letter and failed requeued (attempts reset); the completed row skipped.
	"by-ids.json": {matched: 3, requeued: []string{rerunDeadLetter, rerunFailed}, skipped: []string{rerunCompleted}},
	// dead_letter and uncertain on Acme's connection, oldest first.
	"by-filter.json": {matched: 2, requeued: []string{rerunDeadLetter, rerunUncertain}},
	// What a rerun of everything stuck would take; nothing is written.
	"dry-run.json": {dryRun: true, matched: 3, requeued: []string{rerunDeadLetter, rerunFailed, rerunUncertain}},
	// Requeued and sent at once.
	"dispatch-now.json": {matched: 2, requeued: []string{rerunDeadLetter, rerunFailed}, dispatched: 2},
	// An id this organization does not have: not found, nothing changes.
	"rerun-ids.json": {skipped: []string{"0b6e2c55-2b0c-4d8e-9a43-5f1f0c1d2e3f"}},
	// A connection and a day with no rows.
	"dry-run-filter.json": {dryRun: true},
	// Acme's connection, not disabled: nothing to enable, no row requeued
	// (the request is audited). On an empty database the connection is
	// answered skipped, "connection not found".
	"enable-connection.json": {},
}

// rerunEvent is the part of a sample payload the checks compare with.
type rerunEvent struct {
	OrganizationID string `json:"organizationId"`
	ResetAttempts  bool   `json:"resetAttempts"`
	DispatchNow    bool   `json:"dispatchNow"`
	DryRun         bool   `json:"dryRun"`
	Reason         string `json:"reason"`
	RequestedBy    string `json:"requestedBy"`
	// EnableConnection is set in the enableConnection sample only.
	EnableConnection string `json:"enableConnection"`
}

func TestRIERerunFunction(t *testing.T) {
	const folder, logicalID = "rerun", "RerunFunction"
	requireLogicalID(t, folder, logicalID)
	bin := bootstrap(t, folder)
	s := newStack(t, folder)
	emu := startEmulator(t, logicalID, bin, functionEnv(s.DatabaseURL, s.QueueURL))

	for i, ev := range events(t, folder) {
		t.Run(ev.Name, func(t *testing.T) {
			s.reset(t)
			s.seedRerun(t)
			var payload rerunEvent
			if err := json.Unmarshal(ev.Payload, &payload); err != nil {
				t.Fatal(err)
			}
			before := s.state(t)
			inv := emu.invoke(t, ev.Payload)
			if i == 0 {
				logFirstInvoke(t, emu, bin, ev.Name)
			}
			if msg := inv.FunctionError(); msg != "" {
				t.Fatalf("function error: %s", msg)
			}
			t.Logf("%s → %s (%s)", ev.Name, inv.Body, inv.Took.Round(100_000))
			var got rerunResult
			decodeStrict(t, inv.Body, &got, "dryRun", "matched", "requeued", "skipped", "dispatched")
			if got.Requeued == nil || got.Skipped == nil {
				t.Errorf("requeued and skipped must be lists, never null: %s", inv.Body)
			}
			checkRerun(t, s, payload, before, got)
			if enable := payload.EnableConnection; (enable != "") != (got.EnabledConnection != nil) ||
				(enable != "" && got.EnabledConnection.ConnectionID != enable) {
				t.Errorf("enableConnection %q answered %s", enable, inv.Body)
			}

			want, ok := rerunWants[ev.Name]
			if !ok {
				t.Logf("no expectation for %s: checked the response against the database only", ev.Name)
				return
			}
			var skipped []string
			for _, sk := range got.Skipped {
				skipped = append(skipped, sk.ID)
				if sk.Reason == "" {
					t.Errorf("skipped %s without a reason", sk.ID)
				}
			}
			if got.DryRun != want.dryRun || got.Matched != want.matched || got.Dispatched != want.dispatched ||
				!slices.Equal(got.Requeued, orEmpty(want.requeued)) || !slices.Equal(sorted(skipped), sorted(want.skipped)) {
				t.Errorf("got %s\nwant dryRun %v, matched %d, requeued %v, skipped %v, dispatched %d", inv.Body,
					want.dryRun, want.matched, want.requeued, want.skipped, want.dispatched)
			}
		})
	}

	// Every sample event answers without a function error on an empty
	// migrated database as well: nothing matched, requeued or enabled.
	for _, ev := range events(t, folder) {
		t.Run("empty database/"+ev.Name, func(t *testing.T) {
			s.reset(t)
			inv := emu.invoke(t, ev.Payload)
			if msg := inv.FunctionError(); msg != "" {
				t.Fatalf("function error on an empty database: %s", msg)
			}
			var got rerunResult
			if err := json.Unmarshal(inv.Body, &got); err != nil {
				t.Fatalf("response %s: %v", inv.Body, err)
			}
			if got.Matched != 0 || len(got.Requeued) != 0 || got.Dispatched != 0 || got.EnabledConnection != nil {
				t.Errorf("on an empty database: %s", inv.Body)
			}
		})
	}

	// A bad payload fails the invocation with a function error naming the
	// field, and changes nothing.
	for _, bad := range []struct{ payload, field string }{
		{`{"organizationId": "` + orgA + `", "outboxIds": ["` + rerunFailed + `"], "reason": "retry", "dryrun": false}`, "dryrun"},
		{`{"organizationId": "` + orgA + `", "filter": {"statuses": ["completed"]}, "reason": "retry"}`, "filter.statuses[0]"},
		{`{"organizationId": "` + orgA + `", "outboxIds": ["` + rerunFailed + `"]}`, "reason"},
	} {
		t.Run("rejects "+bad.field, func(t *testing.T) {
			s.reset(t)
			s.seedRerun(t)
			before := s.state(t)
			inv := emu.invoke(t, []byte(bad.payload))
			msg := inv.FunctionError()
			if msg == "" || !strings.Contains(msg, bad.field) {
				t.Errorf("response %s: want a function error naming %q", inv.Body, bad.field)
			}
			after := s.state(t)
			if diffs := diffOutside(before, after, nil); len(diffs) > 0 || len(after.Audits) != 0 {
				t.Errorf("a rejected payload changed the database (%d audit rows): %s", len(after.Audits), strings.Join(diffs, "\n"))
			}
		})
	}
}

// checkRerun checks the database against the response: a dry run wrote
// nothing; otherwise exactly the requeued rows changed (queued and due, or
// leased and sent with dispatchNow), their conflicts are resolved with the
// reason, and one audit row tells who, why and what.
func checkRerun(t *testing.T, s *stack, ev rerunEvent, before dbState, got rerunResult) {
	t.Helper()
	msgs := s.drain(t)
	if got.DryRun || ev.DryRun {
		if !got.DryRun {
			t.Errorf("the payload asked for a dry run, the response says dryRun false")
		}
		after := s.state(t)
		if diffs := diffOutside(before, after, nil); len(diffs) > 0 || len(after.Audits) != 0 {
			t.Errorf("a dry run changed the database (%d audit rows): %s", len(after.Audits), strings.Join(diffs, "\n"))
		}
		if len(msgs) != 0 || got.Dispatched != 0 {
			t.Errorf("a dry run sent %d messages (dispatched %d)", len(msgs), got.Dispatched)
		}
		return
	}
	requeued := orEmpty(got.Requeued)

	// Rows the rerun did not requeue are exactly as seeded (Globex's too).
	if diffs := diffOutside(before, s.state(t), requeued); len(diffs) > 0 {
		t.Errorf("rows the rerun did not requeue changed:\n%s", strings.Join(diffs, "\n"))
	}
	state := `status = 'queued' and coalesce(next_attempt_at, now()) <= now()`
	if ev.ResetAttempts {
		state += ` and attempt_count = 0`
	}
	if ev.DispatchNow {
		// Sent at once: leased by the dispatch that followed, its attempt counted.
		state = `status = 'processing' and lease_expires_at > now() and claim_token is not null and attempt_count = 1`
	}
	if n := s.count(t, `select count(*) from external_integration_outbox where id = any($1) and organization_id = $2 and `+
		state, requeued, ev.OrganizationID); n != len(requeued) {
		t.Errorf("%d of %d requeued rows are in the expected state (%s)", n, len(requeued), state)
	}
	if ev.DispatchNow {
		if len(msgs) != len(requeued) || got.Dispatched != len(requeued) {
			t.Errorf("dispatchNow: %d messages, dispatched %d, want %d", len(msgs), got.Dispatched, len(requeued))
		}
		s.checkMessagesMatchClaims(t, msgs)
	} else if len(msgs) != 0 || got.Dispatched != 0 {
		t.Errorf("without dispatchNow: %d messages, dispatched %d", len(msgs), got.Dispatched)
	}

	if n := s.count(t, `select count(*) from external_integration_conflicts where outbox_id = any($1) and status <> 'resolved'`,
		requeued); n != 0 {
		t.Errorf("%d conflicts of requeued rows are still open", n)
	}
	if n := s.count(t, `select count(*) from external_integration_conflicts where outbox_id = any($1) and status = 'resolved'
		and resolution_reason = $2 and resolved_at is not null`, requeued, ev.Reason); n != s.count(t,
		`select count(*) from external_integration_conflicts where outbox_id = any($1)`, requeued) {
		t.Errorf("a resolved conflict lacks the rerun's reason or resolved_at")
	}

	var audit struct {
		Org, RequestedBy, Reason string
		Affected                 []string
		DispatchNow              bool
	}
	var n int
	err := s.Pool.QueryRow(context.Background(), `select count(*) over (), organization_id::text, coalesce(requested_by, ''),
			reason, affected_ids::text[], dispatch_now
		from external_integration_rerun_audit`).Scan(&n, &audit.Org, &audit.RequestedBy, &audit.Reason, &audit.Affected, &audit.DispatchNow)
	if err != nil || n != 1 {
		t.Fatalf("want exactly one audit row: n=%d err=%v", n, err)
	}
	if audit.Org != ev.OrganizationID || audit.RequestedBy != ev.RequestedBy || audit.Reason != ev.Reason ||
		audit.DispatchNow != ev.DispatchNow || !slices.Equal(sorted(audit.Affected), sorted(requeued)) {
		t.Errorf("audit row %+v does not match the payload %+v and requeued %v", audit, ev, requeued)
	}
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func sorted(s []string) []string {
	out := append([]string{}, s...)
	sort.Strings(out)
	return out
}
