package provider

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"integration-outbox/internal/credential"
)

// receiversSchema compiles docs/receivers.schema.json, the receivers'
// contract every webhook body must match.
func receiversSchema(t *testing.T) *jsonschema.Schema {
	return compileSchemaFile(t, filepath.Join("..", "..", "docs", "receivers.schema.json"))
}

// TestWebhookSupplierRequest: a supplier goes as a signed event like the
// purchase order: the same headers and signatures (both schemes, checked
// against the reference verifiers in signature_test.go), the body of
// docs/receivers.md with every key present (empty when the host gave
// nothing), valid against docs/receivers.schema.json.
func TestWebhookSupplierRequest(t *testing.T) {
	t.Parallel()
	schema := receiversSchema(t)
	full := supplierCommand(testSupplier())
	sparse := supplierCommand(Supplier{ID: "7b0c3a2e-1d4f-4e5a-9b6c-8d7e6f5a4b3c", Name: "Acme"})
	for _, tt := range []struct {
		name string
		cmd  SupplierPush
		want string
	}{
		{"every field", full, `{"commandType":"push_supplier","idempotencyKey":"sup-1","supplier":{"id":"7b0c3a2e-1d4f-4e5a-9b6c-8d7e6f5a4b3c",` +
			`"name":"Acme \"Fresh\" Supplies","email":"orders@acme.example","phone":"+44 113 496 0000","addressLines":["Unit 4","12 Dock Road"],` +
			`"city":"Leeds","postalCode":"LS1 4AB","country":"United Kingdom","taxNumber":"GB123456789","currencyCode":"GBP","code":"SUP-001"}}`},
		{"name only", sparse, `{"commandType":"push_supplier","idempotencyKey":"sup-1","supplier":{"id":"7b0c3a2e-1d4f-4e5a-9b6c-8d7e6f5a4b3c",` +
			`"name":"Acme","email":"","phone":"","addressLines":[],"city":"","postalCode":"","country":"","taxNumber":"","currencyCode":"","code":""}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, seen := testServer(t, false, func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusCreated)
				w.Write([]byte(`{"id":"SUP-REC-1"}`))
			})
			w := newTestWebhook(t, WebhookConfig{AllowPrivateNetworks: true})
			res, err := w.PushSupplier(context.Background(), conn(srv.URL+"/suppliers"), testCred(), tt.cmd)
			if err != nil || res.Status != StatusCompleted || res.ExternalID != "SUP-REC-1" || res.StatusCode != 201 {
				t.Fatalf("PushSupplier = %+v, %v", res, err)
			}
			hits, _, body, h := seen.snapshot()
			if hits != 1 || string(body) != tt.want {
				t.Errorf("%d hits, body\n%s\nwant\n%s", hits, body, tt.want)
			}
			v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if err := schema.Validate(v); err != nil {
				t.Errorf("body does not match docs/receivers.schema.json: %v", err)
			}
			for name, want := range map[string]string{
				"Content-Type":       "application/json",
				"User-Agent":         "integration-outbox-webhook/1",
				"Idempotency-Key":    "sup-1",
				"webhook-id":         "sup-1",
				"webhook-timestamp":  "1700000000",
				"Authorization":      "Bearer " + testToken,
				"X-Outbox-Signature": OutboxSignature([]string{testSigning}, testNow, body),
			} {
				if got := h.Get(name); got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
			if got, want := h.Get("webhook-signature"), StandardWebhooksSignature([][]byte{[]byte(testSigning)}, "sup-1", testNow, body); got != want {
				t.Errorf("webhook-signature = %q, want %q", got, want)
			}
		})
	}
}

// TestWebhookSupplierSchemaRefuses: the supplier part of the schema is not
// vacuous.
func TestWebhookSupplierSchemaRefuses(t *testing.T) {
	t.Parallel()
	schema := receiversSchema(t)
	body, err := encodeSupplierBody(supplierCommand(testSupplier()))
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]string{
		"no name":             strings.Replace(string(body), `"name":"Acme \"Fresh\" Supplies"`, `"name":""`, 1),
		"email left out":      strings.Replace(string(body), `"email":"orders@acme.example",`, ``, 1),
		"lower-case currency": strings.Replace(string(body), `"GBP"`, `"gbp"`, 1),
		"extra key":           strings.Replace(string(body), `"code":"SUP-001"`, `"code":"SUP-001","vat":1`, 1),
		"order command type":  strings.Replace(string(body), `"push_supplier"`, `"push_purchase_order"`, 1),
	} {
		if bad == string(body) {
			t.Fatalf("%s: the mutation did not apply", name)
		}
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(bad))
		if err != nil {
			t.Fatal(err)
		}
		if schema.Validate(v) == nil {
			t.Errorf("schema accepts a supplier body with %s", name)
		}
	}
}

// TestWebhookSupplierAnswers: the answer is treated as the purchase
// order's (docs/receivers.md).
func TestWebhookSupplierAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		body   string
		want   Result
		kind   ErrorKind
		auth   bool
	}{
		{status: 200, body: `{"id":42}`, want: Result{Status: StatusCompleted, ExternalID: "42", StatusCode: 200}},
		{status: 202, body: `{"id":"q-1"}`, want: Result{Status: StatusAccepted, ExternalID: "q-1", StatusCode: 202}},
		{status: 409, body: `{"id":"SUP-REC-1"}`, want: Result{Status: StatusCompleted, ExternalID: "SUP-REC-1", StatusCode: 409}},
		{status: 422, body: `{"error":"no such country"}`, kind: Rejected},
		{status: 403, kind: Rejected, auth: true},
		{status: 503, kind: Retryable},
	}
	for _, tt := range tests {
		srv, _ := testServer(t, false, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(tt.status)
			w.Write([]byte(tt.body))
		})
		w := newTestWebhook(t, WebhookConfig{AllowPrivateNetworks: true, Timeout: 2 * time.Second})
		res, err := w.PushSupplier(context.Background(), conn(srv.URL), testCred(), supplierCommand(testSupplier()))
		if tt.kind == 0 {
			if err != nil || res != tt.want {
				t.Errorf("%d: %+v, %v; want %+v", tt.status, res, err, tt.want)
			}
			continue
		}
		if e := asError(t, err); e.Kind != tt.kind || e.AuthFailed != tt.auth || e.StatusCode != tt.status {
			t.Errorf("%d: %+v", tt.status, e)
		}
	}

	w := newTestWebhook(t, WebhookConfig{AllowPrivateNetworks: true})
	cmd := supplierCommand(testSupplier())
	cmd.Supplier.ID = ""
	if _, err := w.PushSupplier(context.Background(), conn("http://127.0.0.1:1"), credential.Credential{}, cmd); asError(t, err).Kind != PayloadInvalid {
		t.Errorf("no supplier id = %v", err)
	}
}

// TestSandboxSupplier: the sandbox creates a supplier with an id from the
// key, updates it keeping its id, and answers failures as its config says.
func TestSandboxSupplier(t *testing.T) {
	t.Parallel()
	s := NewSandbox(SandboxConfig{Sleep: (&fakeSleep{}).sleep})
	cmd := supplierCommand(testSupplier())
	res, err := s.PushSupplier(context.Background(), sandboxConn(`{}`), credential.Credential{}, cmd)
	if err != nil || res.Status != StatusCompleted || !strings.HasPrefix(res.ExternalID, "sandbox-") || res.Action != SupplierCreated ||
		res.Document == nil || res.Document.ID != res.ExternalID {
		t.Fatalf("create = %+v, %v", res, err)
	}
	again, _ := s.PushSupplier(context.Background(), sandboxConn(`{}`), credential.Credential{}, cmd)
	if again.ExternalID != res.ExternalID {
		t.Errorf("same key, ids %q then %q", res.ExternalID, again.ExternalID)
	}
	cmd.IdempotencyKey, cmd.Document = "sup-2", res.Document
	upd, err := s.PushSupplier(context.Background(), sandboxConn(`{}`), credential.Credential{}, cmd)
	if err != nil || upd.ExternalID != res.ExternalID || upd.Action != SupplierUpdated {
		t.Errorf("update = %+v, %v", upd, err)
	}
	if _, err := s.PushSupplier(context.Background(), sandboxConn(`{"answer":"reject"}`), credential.Credential{}, cmd); asError(t, err).Kind != Rejected {
		t.Errorf("reject = %v", err)
	}
	if res, err := s.PushSupplier(context.Background(), sandboxConn(`{"answer":"accepted"}`), credential.Credential{}, cmd); err != nil ||
		res.Status != StatusAccepted || res.Action != "" {
		t.Errorf("accepted = %+v, %v", res, err)
	}
	if _, err := s.PushSupplier(context.Background(), sandboxConn(`{"bogus":1}`), credential.Credential{}, cmd); asError(t, err).Kind != ConfigInvalid {
		t.Errorf("bad config = %v", err)
	}
}
