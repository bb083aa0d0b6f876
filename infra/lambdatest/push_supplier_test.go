package lambdatest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"integration-outbox/internal/testenv"
)

// The fixed ids of functions/push-supplier/events/*.json.
const (
	supplier1     = "66666666-6666-4666-8666-666666666611"
	supplier2     = "66666666-6666-4666-8666-666666666612"
	supplierRow1  = "77777777-7777-4777-8777-777777777711"
	supplierRow2  = "77777777-7777-4777-8777-777777777712"
	supplierClaim = "88888888-8888-4888-8888-8888888888" // + "11", "12"
)

// seedSuppliers: the two push_supplier rows the supplier events deliver,
// claimed and leased by a dispatch with the claim tokens of the messages,
// on Acme's webhook connection.
func (s *stack) seedSuppliers(t *testing.T, credential, webhookURL string) {
	t.Helper()
	s.seedConnections(t, credential, webhookURL)
	for i, row := range []struct{ id, supplier, name string }{
		{supplierRow1, supplier1, "Acme Paper Co"}, {supplierRow2, supplier2, "Fjord Fish AS"}} {
		payload, _ := json.Marshal(map[string]any{"name": row.name, "email": "orders@example.com",
			"addressLines": []string{"1 Harbour Road"}, "city": "Bergen", "country": "NO", "code": fmt.Sprintf("SUP-%04d", 42+i)})
		s.exec(t, `insert into external_integration_outbox (id, organization_id, integration_connection_id, provider,
				command_type, local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count,
				claim_token, claimed_at, lease_expires_at, created_at)
			values ($1, $2, $3, 'webhook', 'push_supplier', 'supplier', $4, $5, $6, 'processing', 1,
				$7, now(), now() + interval '15 minutes', now() - interval '1 minute')`,
			row.id, orgA, connA, row.supplier, payload, fmt.Sprintf("supplier:%s:v1", row.supplier),
			fmt.Sprintf("%s%d", supplierClaim, 11+i))
	}
}

// supplierRows are the push_supplier rows an event's records name.
func supplierRows(t *testing.T, payload []byte) []string {
	t.Helper()
	var ev struct {
		Records []struct {
			Body string `json:"body"`
		} `json:"Records"`
	}
	if err := json.Unmarshal(payload, &ev); err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, r := range ev.Records {
		var m struct{ OutboxID, CommandType string }
		if json.Unmarshal([]byte(r.Body), &m) == nil && m.CommandType == "push_supplier" && !slices.Contains(rows, m.OutboxID) {
			rows = append(rows, m.OutboxID)
		}
	}
	return rows
}

// Every sample event of functions/push-supplier runs under the runtime
// emulator without a function error: on an empty migrated database (nothing
// written), then with the rows its messages claimed, each of which is
// recorded once (a message repeated in a batch runs once); the same event
// again changes nothing and calls no one. A record that is not a
// push_supplier command (junk, a purchase order on the wrong queue) is
// acknowledged and changes nothing.
func TestRIEPushSupplierFunction(t *testing.T) {
	const folder, logicalID = "push-supplier", "PushSupplierFunction"
	requireLogicalID(t, folder, logicalID)
	bin := bootstrap(t, folder)
	s := newStack(t, folder)
	hook := testenv.NewReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id": "ACME-CONTACT-1"}`)
	})
	credential := createCredential(t)
	env := functionEnv(s.DatabaseURL, "")
	delete(env, "PUSH_PURCHASE_ORDER_QUEUE_URL")
	emu := startEmulator(t, logicalID, bin, env)

	for i, ev := range events(t, folder) {
		t.Run(ev.Name, func(t *testing.T) {
			s.reset(t)
			s.exec(t, `truncate integration_outbox_provider_documents`)
			inv := emu.invoke(t, ev.Payload)
			if i == 0 {
				logFirstInvoke(t, emu, bin, ev.Name)
			}
			t.Logf("%s on an empty database → %s", ev.Name, inv.Body)
			checkPushResponse(t, inv)
			if n := s.count(t, `select count(*) from external_integration_attempts`); n != 0 {
				t.Errorf("%d attempts written on an empty database", n)
			}

			s.seedSuppliers(t, credential, hook.URL+"/api/suppliers")
			before, calls := s.state(t), len(hook.Requests())
			checkPushResponse(t, emu.invoke(t, ev.Payload))
			rows := supplierRows(t, ev.Payload)
			if diffs := diffOutside(before, s.state(t), rows); len(diffs) > 0 {
				t.Errorf("the push changed rows its event does not name:\n%s", strings.Join(diffs, "\n"))
			}
			completed := 0
			for _, id := range rows {
				var status string
				var ref, lastErr *string
				if err := s.Pool.QueryRow(context.Background(), `select status::text, provider_reference, last_error
					from external_integration_outbox where id = $1`, id).Scan(&status, &ref, &lastErr); err != nil {
					t.Fatal(err)
				}
				// Completed once the webhook provider pushes suppliers;
				// unsupported, saying so, where it cannot yet.
				switch {
				case status == "completed" && ref != nil:
					completed++
				case status == "unsupported" && strings.Contains(deref(lastErr), "push_supplier"):
				default:
					t.Errorf("row %s: %s, provider_reference %s, last_error %s", id, status, deref(ref), deref(lastErr))
				}
				if n := s.count(t, `select count(*) from external_integration_attempts where outbox_id = $1`, id); n > 1 {
					t.Errorf("row %s: %d attempts recorded for one delivery", id, n)
				}
			}
			if n := len(hook.Requests()) - calls; n != completed {
				t.Errorf("the webhook got %d requests for %d completed rows", n, completed)
			}
			t.Logf("%s: %d rows named, %d completed", ev.Name, len(rows), completed)

			recorded, calls := s.state(t), len(hook.Requests())
			checkPushResponse(t, emu.invoke(t, ev.Payload))
			if diffs := diffOutside(recorded, s.state(t), nil); len(diffs) > 0 {
				t.Errorf("a redelivery changed rows:\n%s", strings.Join(diffs, "\n"))
			}
			if n := len(hook.Requests()) - calls; n != 0 {
				t.Errorf("a redelivery called the provider %d times", n)
			}
		})
	}
}
