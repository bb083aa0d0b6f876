package lambdatest_test

import (
	"strings"
	"testing"
)

const (
	expiredRow   = "eeeeeeee-eeee-4eee-8eee-eeeeeeeeee01" // processing, lease expired, never accepted
	expiredClaim = "eeeeeeee-eeee-4eee-8eee-eeeeeeeeee99"
)

// seedDispatch: 37 due rows (Acme: 30 queued pushes, one unknown command
// type, one push whose worker died with its lease; Globex: 5 queued pushes)
// and 3 that no dispatch may take (2 failed rows not yet due, 1 completed).
func (s *stack) seedDispatch(t *testing.T) {
	t.Helper()
	s.seedConnections(t, "integrations/acme-webhook", "https://erp.acme.example/api/purchase-orders")
	s.exec(t, `
		insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
			local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count, created_at)
		select $1::uuid, $2::uuid, 'webhook', 'push_purchase_order', 'purchase_order', gen_random_uuid(),
			'{"externalSupplierId": "SUP-ACME-001"}', 'acme-po-' || i, 'queued', 0,
			now() - interval '1 hour' + make_interval(secs => i)
		from generate_series(1, 30) i`, orgA, connA)
	s.exec(t, `
		insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
			local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count, created_at)
		select $1::uuid, $2::uuid, 'sandbox', 'push_purchase_order', 'purchase_order', gen_random_uuid(),
			'{"externalSupplierId": "SUP-GLOBEX-7"}', 'globex-po-' || i, 'queued', 0,
			now() - interval '50 minutes' + make_interval(secs => i)
		from generate_series(1, 5) i`, orgB, connB)
	s.exec(t, `
		insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
			local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count, created_at)
		values ($1, $2, 'webhook', 'sync_inventory_levels', 'stock_item', gen_random_uuid(), '{}', 'acme-inv-1', 'queued', 0,
			now() - interval '3 hours')`, orgA, connA)
	s.exec(t, `
		insert into external_integration_outbox (id, organization_id, integration_connection_id, provider, command_type,
			local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count,
			claim_token, claimed_at, lease_expires_at, started_at, created_at)
		values ($1, $2, $3, 'webhook', 'push_purchase_order', 'purchase_order', gen_random_uuid(),
			'{"externalSupplierId": "SUP-ACME-001"}', 'acme-po-crashed', 'processing', 1,
			$4, now() - interval '20 minutes', now() - interval '5 minutes', now() - interval '19 minutes',
			now() - interval '2 hours')`, expiredRow, orgA, connA, expiredClaim)
	s.exec(t, `
		insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
			local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count, next_attempt_at,
			last_error, created_at)
		select $1::uuid, $2::uuid, 'webhook', 'push_purchase_order', 'purchase_order', gen_random_uuid(),
			'{"externalSupplierId": "SUP-ACME-001"}', 'acme-po-retry-' || i, 'failed', 2, now() + interval '1 hour',
			'provider answered 503', now() - interval '4 hours'
		from generate_series(1, 2) i`, orgA, connA)
	s.exec(t, `
		insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
			local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count, completed_at,
			provider_reference, created_at)
		values ($1, $2, 'webhook', 'push_purchase_order', 'purchase_order', gen_random_uuid(),
			'{"externalSupplierId": "SUP-ACME-001"}', 'acme-po-done', 'completed', 1, now() - interval '5 hours',
			'ACME-PO-1', now() - interval '5 hours')`, orgA, connA)
}

type dispatchSummary struct {
	Claimed     int `json:"claimed"`
	Dispatched  int `json:"dispatched"`
	Unsupported int `json:"unsupported"`
	Released    int `json:"released"`
}

// dispatchWant is what one sample event must do to the seeded rows.
type dispatchWant struct {
	claimed int
	// full: every due row is taken (36 sent, the unknown command unsupported).
	full bool
	// org: only this organization's rows are taken.
	org string
}

var dispatchWants = map[string]dispatchWant{
	"scheduler-input.json":  {claimed: 37, full: true},
	"eventbridge-rule.json": {claimed: 37, full: true},
	"console-limit.json":    {claimed: 25},
	"console-tenant.json":   {claimed: 5, org: orgB},
}

func TestRIEDispatchFunction(t *testing.T) {
	const folder, logicalID = "dispatch", "DispatchFunction"
	requireLogicalID(t, folder, logicalID)
	bin := bootstrap(t, folder)
	s := newStack(t, folder)
	env := functionEnv(s.DatabaseURL, s.QueueURL)
	env["CLAIM_BATCH_SIZE"] = "10" // a full run takes several batches
	// The sample events' claim counts are those of one uncapped run (Acme's 30
	// rows share one connection); the in-flight caps have their own tests.
	env["CONNECTION_MAX_IN_FLIGHT"] = "0"
	emu := startEmulator(t, logicalID, bin, env)

	for i, ev := range events(t, folder) {
		t.Run(ev.Name, func(t *testing.T) {
			s.reset(t)
			s.seedDispatch(t)
			inv := emu.invoke(t, ev.Payload)
			if i == 0 {
				logFirstInvoke(t, emu, bin, ev.Name)
			}
			if msg := inv.FunctionError(); msg != "" {
				t.Fatalf("function error: %s", msg)
			}
			var got dispatchSummary
			decodeStrict(t, inv.Body, &got, "claimed", "dispatched", "unsupported", "released")
			t.Logf("%s → %s (%s)", ev.Name, inv.Body, inv.Took.Round(100_000))
			checkDispatch(t, s, ev.Name, got)
		})
	}

	// A console payload the handler does not own fails the invocation with
	// a function error naming the field, and claims nothing.
	for _, bad := range []struct{ name, payload, field string }{
		{"rejects limit 0", `{"limit": 0}`, "limit"},
		{"rejects unknown key", `{"limit": 10, "organisationId": "` + orgA + `"}`, "organisationId"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			s.reset(t)
			s.seedDispatch(t)
			inv := emu.invoke(t, []byte(bad.payload))
			msg := inv.FunctionError()
			if msg == "" || !strings.Contains(msg, bad.field) {
				t.Errorf("response %s: want a function error naming %q", inv.Body, bad.field)
			}
			if n := s.count(t, `select count(*) from external_integration_outbox where status = 'queued'`); n != 36 {
				t.Errorf("%d rows still queued after a rejected payload, want 36", n)
			}
			if msgs := s.drain(t); len(msgs) != 0 {
				t.Errorf("a rejected payload sent %d messages", len(msgs))
			}
		})
	}
}

func checkDispatch(t *testing.T, s *stack, event string, got dispatchSummary) {
	t.Helper()
	if got.Claimed != got.Dispatched+got.Unsupported+got.Released {
		t.Errorf("claimed %d != dispatched %d + unsupported %d + released %d", got.Claimed, got.Dispatched, got.Unsupported, got.Released)
	}
	if got.Released != 0 {
		t.Errorf("released %d rows although every send succeeded", got.Released)
	}
	// Rows this invocation leased: processing under a fresh claim token,
	// their attempt counted.
	leased := s.count(t, `select count(*) from external_integration_outbox
		where status = 'processing' and lease_expires_at > now() and claim_token is distinct from $1
		  and attempt_count = case when id = $2 then 2 else 1 end`, expiredClaim, expiredRow)
	if leased != got.Dispatched {
		t.Errorf("%d rows leased in the database, dispatched %d", leased, got.Dispatched)
	}
	if n := s.count(t, `select count(*) from external_integration_outbox where status = 'unsupported'`); n != got.Unsupported {
		t.Errorf("%d rows unsupported in the database, summary says %d", n, got.Unsupported)
	}
	msgs := s.drain(t)
	if len(msgs) != got.Dispatched {
		t.Errorf("%d messages in the queue, dispatched %d", len(msgs), got.Dispatched)
	}
	s.checkMessagesMatchClaims(t, msgs)
	if n := s.count(t, `select count(*) from external_integration_outbox
		where (status = 'failed' and attempt_count = 2 and next_attempt_at > now() and claim_token is null)
		   or (status = 'completed' and attempt_count = 1)`); n != 3 {
		t.Errorf("a row that is not due (or completed) was touched: %d of 3 left as seeded", n)
	}

	want, ok := dispatchWants[event]
	if !ok {
		t.Logf("no expectation for %s: checked the summary against the database and the queue only", event)
		return
	}
	if got.Claimed != want.claimed {
		t.Errorf("claimed %d, want %d", got.Claimed, want.claimed)
	}
	if want.full {
		if got.Dispatched != 36 || got.Unsupported != 1 {
			t.Errorf("got %+v, want 36 dispatched and the unknown command type unsupported", got)
		}
		if n := s.count(t, `select count(*) from external_integration_outbox where status = 'queued'
			   or (status = 'processing' and lease_expires_at <= now())`); n != 0 {
			t.Errorf("%d due rows left behind by a full run", n)
		}
	}
	if want.org != "" {
		if n := s.count(t, `select count(*) from external_integration_outbox
			where organization_id <> $1 and (status = 'unsupported' or (status = 'processing' and lease_expires_at > now()
			  and claim_token is distinct from $2))`, want.org, expiredClaim); n != 0 {
			t.Errorf("%d rows of other organizations were claimed", n)
		}
		for _, m := range msgs {
			if m.OrganizationID != want.org {
				t.Errorf("message for organization %s", m.OrganizationID)
			}
		}
	}
}

// requireLogicalID fails when template.yaml maps the folder elsewhere.
func requireLogicalID(t *testing.T, folder, logicalID string) {
	t.Helper()
	if got := logicalIDs(t)[folder]; got != logicalID {
		t.Fatalf("template.yaml: functions/%s is %q, this test expects %s", folder, got, logicalID)
	}
}
