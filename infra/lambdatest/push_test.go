package lambdatest_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"integration-outbox/internal/testenv"
)

const (
	acmeToken         = "tok-acme-live-5f2d"
	acmeSigningSecret = "whsec-acme-9c41"
)

// newWebhookReceiver is Acme's ERP: it records every request and answers 201
// with a provider reference.
func newWebhookReceiver(t *testing.T) *testenv.Receiver {
	return testenv.NewReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		var doc struct {
			PurchaseOrder struct {
				ID string `json:"id"`
			} `json:"purchaseOrder"`
		}
		json.NewDecoder(r.Body).Decode(&doc)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id": "ACME-%s"}`, doc.PurchaseOrder.ID)
	})
}

// createCredential stores Acme's webhook secret in moto, tagged for Acme,
// under the credential prefix, and returns its name.
func createCredential(t *testing.T) string {
	t.Helper()
	value, _ := json.Marshal(map[string]string{"token": acmeToken, "signingSecret": acmeSigningSecret})
	name, _ := testenv.CreateSecret(t, smc, testenv.SecretName(t, "-acme-webhook"), string(value), orgA)
	return name
}

// seedPush: the two rows sqs-batch.json delivers, claimed and leased by a
// dispatch with the claim tokens of the messages, and their purchase orders.
func (s *stack) seedPush(t *testing.T, credential, webhookURL string) {
	t.Helper()
	s.seedConnections(t, credential, webhookURL)
	for i, po := range []string{po1, po2} {
		s.exec(t, `insert into purchase_orders (id, organization_id, location_id, order_number, status, currency_code)
			values ($1, $2, $3, $4, 'approved', 'EUR')`, po, orgA, locA, fmt.Sprintf("PO-2026-%04d", 101+i))
		for line := range i + 2 {
			s.exec(t, `insert into purchase_order_lines (purchase_order_id, stock_item_id, ordered_quantity,
					purchase_unit_code, normalized_unit_code, units_per_purchase_unit_snapshot, unit_price_minor_snapshot, created_at)
				values ($1, gen_random_uuid(), $2, 'case', 'each', 12, 2499, now() + make_interval(secs => $3))`,
				po, 3+line, line)
		}
	}
	for i, row := range []struct{ id, claim, po string }{{pushRow1, pushClaim1, po1}, {pushRow2, pushClaim2, po2}} {
		s.exec(t, `insert into external_integration_outbox (id, organization_id, integration_connection_id, provider,
				command_type, local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count,
				claim_token, claimed_at, lease_expires_at, created_at)
			values ($1, $2, $3, 'webhook', 'push_purchase_order', 'purchase_order', $4, $5, $6, 'processing', 1,
				$7, now(), now() + interval '15 minutes', now() - interval '1 minute')`,
			row.id, orgA, connA, row.po, fmt.Sprintf(`{"externalSupplierId": %q}`, supplierRef),
			fmt.Sprintf("purchase_order:%s:v%d", row.po, i+1), row.claim)
	}
}

func TestRIEPushPurchaseOrderFunction(t *testing.T) {
	const folder, logicalID = "push-purchase-order", "PushPurchaseOrderFunction"
	requireLogicalID(t, folder, logicalID)
	bin := bootstrap(t, folder)
	s := newStack(t, folder)
	hook := newWebhookReceiver(t)
	credential := createCredential(t)
	emu := startEmulator(t, logicalID, bin, functionEnv(s.DatabaseURL, s.QueueURL))

	for i, ev := range events(t, folder) {
		t.Run(ev.Name, func(t *testing.T) {
			s.reset(t)
			s.seedPush(t, credential, hook.URL+"/api/purchase-orders")
			before := len(hook.Requests())
			inv := emu.invoke(t, ev.Payload)
			if i == 0 {
				logFirstInvoke(t, emu, bin, ev.Name)
			}
			t.Logf("%s → %s (%s)", ev.Name, inv.Body, inv.Took.Round(100_000))
			checkPushResponse(t, inv)
			reqs := hook.Requests()[before:]
			if ev.Name != "sqs-batch.json" {
				t.Logf("no expectation for %s beyond the response shape", ev.Name)
				return
			}
			checkPushBatch(t, s, reqs)

			// SQS delivers at least once: the same batch again must be
			// acknowledged without calling the provider again.
			again := emu.invoke(t, ev.Payload)
			checkPushResponse(t, again)
			if n := len(hook.Requests()) - before; n != len(reqs) {
				t.Errorf("a redelivery called the provider again: %d requests, want %d", n, len(reqs))
			}
		})
	}

	// A record that is not a command (junk body, stale claim token) is
	// logged and acknowledged: never retried, nothing changed.
	t.Run("acknowledges junk and stale records", func(t *testing.T) {
		s.reset(t)
		s.seedPush(t, credential, hook.URL+"/api/purchase-orders")
		before, calls := s.state(t), len(hook.Requests())
		stale, _ := json.Marshal(map[string]string{"outboxId": pushRow1, "organizationId": orgA, "connectionId": connA,
			"commandType": "push_purchase_order", "claimToken": "88888888-8888-4888-8888-888888888899"})
		event, _ := json.Marshal(map[string]any{"Records": []map[string]any{
			{"messageId": "junk-1", "body": "not json", "eventSource": "aws:sqs", "attributes": map[string]string{"ApproximateReceiveCount": "1"}},
			{"messageId": "stale-1", "body": string(stale), "eventSource": "aws:sqs", "attributes": map[string]string{"ApproximateReceiveCount": "1"}},
		}})
		checkPushResponse(t, emu.invoke(t, event))
		if diffs := diffOutside(before, s.state(t), nil); len(diffs) > 0 {
			t.Errorf("junk or stale records changed rows:\n%s", strings.Join(diffs, "\n"))
		}
		if n := len(hook.Requests()) - calls; n != 0 {
			t.Errorf("junk or stale records called the provider %d times", n)
		}
	})
}

// checkPushResponse: {"batchItemFailures": []}, the key present and the list
// empty (every record handled).
func checkPushResponse(t *testing.T, inv invocation) {
	t.Helper()
	if msg := inv.FunctionError(); msg != "" {
		t.Fatalf("function error: %s", msg)
	}
	var got struct {
		BatchItemFailures []struct {
			ItemIdentifier string `json:"itemIdentifier"`
		} `json:"batchItemFailures"`
	}
	decodeStrict(t, inv.Body, &got, "batchItemFailures")
	var raw map[string]json.RawMessage
	json.Unmarshal(inv.Body, &raw)
	if string(raw["batchItemFailures"]) != "[]" {
		t.Errorf("batchItemFailures = %s, want []", raw["batchItemFailures"])
	}
}

func checkPushBatch(t *testing.T, s *stack, reqs []testenv.Request) {
	t.Helper()
	for _, row := range []struct{ id, po string }{{pushRow1, po1}, {pushRow2, po2}} {
		if n := s.count(t, `select count(*) from external_integration_outbox where id = $1 and status = 'completed'
			and completed_at is not null and provider_reference = $2 and last_error is null`, row.id, "ACME-"+row.po); n != 1 {
			var status, ref, lastErr *string
			s.Pool.QueryRow(context.Background(), `select status, provider_reference, last_error from external_integration_outbox
				where id = $1`, row.id).Scan(&status, &ref, &lastErr)
			t.Errorf("row %s: status %v, provider_reference %v, last_error %v; want completed with ACME-%s",
				row.id, deref(status), deref(ref), deref(lastErr), row.po)
		}
	}
	if n := s.count(t, `select count(*) from external_integration_conflicts`); n != 0 {
		t.Errorf("%d conflicts written for a clean batch", n)
	}
	if len(reqs) != 2 {
		t.Fatalf("the webhook got %d requests, want 2", len(reqs))
	}
	seen := map[string]bool{}
	for _, r := range reqs {
		var doc struct {
			CommandType        string `json:"commandType"`
			IdempotencyKey     string `json:"idempotencyKey"`
			ExternalSupplierID string `json:"externalSupplierId"`
			PurchaseOrder      struct {
				ID             string            `json:"id"`
				OrganizationID string            `json:"organizationId"`
				LocationID     string            `json:"locationId"`
				Items          []json.RawMessage `json:"items"`
			} `json:"purchaseOrder"`
		}
		if err := json.Unmarshal(r.Raw, &doc); err != nil {
			t.Fatalf("webhook body %s: %v", r.Raw, err)
		}
		po := doc.PurchaseOrder
		seen[po.ID] = true
		wantItems := map[string]int{po1: 2, po2: 3}[po.ID]
		if doc.CommandType != "push_purchase_order" || doc.ExternalSupplierID != supplierRef ||
			po.OrganizationID != orgA || po.LocationID != locA || len(po.Items) != wantItems {
			t.Errorf("webhook body %s: want purchase order of Acme at location A with %d items", r.Raw, wantItems)
		}
		if got := r.Header.Get("Idempotency-Key"); got == "" || got != doc.IdempotencyKey ||
			!strings.HasPrefix(got, "purchase_order:"+po.ID) {
			t.Errorf("Idempotency-Key %q, body idempotencyKey %q: want the row's key", got, doc.IdempotencyKey)
		}
		if got := r.Header.Get("Authorization"); got != "Bearer "+acmeToken {
			t.Errorf("Authorization %q: want the secret's token", got)
		}
		if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			t.Errorf("Content-Type %q", r.Header.Get("Content-Type"))
		}
		checkSignature(t, r.Header.Get("X-Outbox-Signature"), r.Raw)
	}
	if !seen[po1] || !seen[po2] {
		t.Errorf("the webhook got orders %v, want %s and %s", seen, po1, po2)
	}
}

// checkSignature verifies X-Outbox-Signature: t=<unix>,v1=<hex HMAC-SHA256
// of "<t>." + body under the secret's signingSecret>.
func checkSignature(t *testing.T, header string, body []byte) {
	t.Helper()
	var ts, v1 string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			v1 = v
		}
	}
	mac := hmac.New(sha256.New, []byte(acmeSigningSecret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	if ts == "" || !hmac.Equal([]byte(v1), []byte(hex.EncodeToString(mac.Sum(nil)))) {
		t.Errorf("X-Outbox-Signature %q does not verify with the secret's signingSecret", header)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<null>"
	}
	return *s
}
