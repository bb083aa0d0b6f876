package provider

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"integration-outbox/internal/credential"
)

// newTestXero is a Xero provider allowed to call the in-process fake API.
func newTestXero(t *testing.T) *Xero {
	t.Helper()
	x := NewXero(testAccountingConfig)
	t.Cleanup(x.CloseIdleConnections)
	return x
}

func xeroConn(api *fakeAPI, extra string) Connection {
	return Connection{ID: "conn-1", Provider: NameXero, Config: json.RawMessage(`{"tenantId": "tenant-7", "accountCode": "300",
		"apiBaseUrl": "` + api.srv.URL + `/api.xro/2.0"` + extra + `}`)}
}

// TestXeroCreatesThenUpdatesThePurchaseOrder: the first push creates the
// purchase order with our key, tenant and token; its PurchaseOrderID is the
// result and the document to remember; a push that knows the document
// updates that purchase order. Both bodies match our schema of Xero's.
func TestXeroCreatesThenUpdatesThePurchaseOrder(t *testing.T) {
	t.Parallel()
	schema := compileSchema(t, "xero_purchase_orders.schema.json")
	api := newFakeAPI(t, reply{status: 200, file: "xero/created.json"}, reply{status: 200, file: "xero/updated.json"})
	x := newTestXero(t)
	cmd := accountingCommand(testContactID, `{"items": {"s-1": {"itemCode": "WIDGET"}}}`, "s-1", "s-2")
	cmd.PurchaseOrder = testOrder("KWD", "s-1", "s-2")

	res, err := x.PushPurchaseOrder(context.Background(), xeroConn(api, `, "status": "DRAFT"`), accountingCred(), cmd)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != StatusCompleted || res.ExternalID != testXeroPOID || res.StatusCode != 200 ||
		res.Document == nil || *res.Document != (Document{ID: testXeroPOID}) {
		t.Errorf("result = %+v", res)
	}

	cmd.IdempotencyKey = "idem-2"
	cmd.Document = res.Document
	if res, err = x.PushPurchaseOrder(context.Background(), xeroConn(api, ""), accountingCred(), cmd); err != nil || res.ExternalID != testXeroPOID {
		t.Fatalf("update = %+v, %v", res, err)
	}

	got := api.requests()
	if len(got) != 2 {
		t.Fatalf("%d requests, want 2", len(got))
	}
	create, update := got[0], got[1]
	for i, r := range got {
		validBody(t, schema, r.body)
		if r.method != http.MethodPost || r.header.Get("Authorization") != "Bearer "+testToken ||
			r.header.Get("xero-tenant-id") != "tenant-7" || r.header.Get("Accept") != "application/json" ||
			r.query.Get("unitdp") != "4" {
			t.Errorf("request %d: %s %s %v %v", i, r.method, r.path, r.query, r.header)
		}
	}
	if create.path != "/api.xro/2.0/PurchaseOrders" || create.query.Get("summarizeErrors") != "false" || create.header.Get("Idempotency-Key") != "idem-1" {
		t.Errorf("create: %s %v key %q", create.path, create.query, create.header.Get("Idempotency-Key"))
	}
	if update.path != "/api.xro/2.0/PurchaseOrders/"+testXeroPOID || update.header.Get("Idempotency-Key") != "idem-2" {
		t.Errorf("update: %s key %q", update.path, update.header.Get("Idempotency-Key"))
	}

	var body struct {
		PurchaseOrders []struct {
			PurchaseOrderID                       string
			Contact                               struct{ ContactID string }
			Reference, CurrencyCode, Date, Status string
			LineItems                             []struct {
				Description           string
				Quantity, UnitAmount  json.Number
				AccountCode, ItemCode string
			}
		}
	}
	dec := json.NewDecoder(strings.NewReader(string(create.body)))
	dec.UseNumber()
	if err := dec.Decode(&body); err != nil {
		t.Fatal(err)
	}
	po := body.PurchaseOrders[0]
	if po.PurchaseOrderID != "" || po.Contact.ContactID != testContactID || po.Reference != "PO-1001" || po.CurrencyCode != "KWD" ||
		po.Date != "2026-12-04" || po.Status != "DRAFT" || len(po.LineItems) != 2 {
		t.Errorf("created purchase order = %s", create.body)
	}
	// Exact decimals: 1999 fils are 1.999 KWD; the quantity as stored.
	if l := po.LineItems[0]; l.Quantity != "2.5" || l.UnitAmount != "1.999" || l.ItemCode != "WIDGET" || l.AccountCode != "" {
		t.Errorf("mapped line = %+v", l)
	}
	if l := po.LineItems[1]; l.AccountCode != "300" || l.ItemCode != "" || l.Description != "Stock item s-2 (case)" {
		t.Errorf("default-account line = %+v", l)
	}
	if !strings.Contains(string(update.body), `"PurchaseOrderID":"`+testXeroPOID+`"`) || !strings.Contains(string(update.body), `"Status":"SUBMITTED"`) {
		t.Errorf("update body = %s", update.body)
	}
}

// TestXeroAnswers: each documented failure is classified where it is born,
// quotes Xero's own message and never the token.
func TestXeroAnswers(t *testing.T) {
	t.Parallel()
	tests := []answerCase{
		{name: "validation exception", reply: reply{status: 400, file: "xero/validation_400.json"}, kind: Rejected,
			says: []string{"xero answered 400", "ValidationException", "Account code '999' is not a valid code", "The Contact could not be found"}},
		{name: "validation error in a 200", reply: reply{status: 200, file: "xero/validation_200.json"}, kind: Rejected,
			says: []string{"Order number must be unique"}},
		{name: "expired token", reply: reply{status: 401, file: "xero/unauthorized_401.json"}, kind: Rejected, auth: true,
			says: []string{"xero answered 401", "TokenExpired"}},
		{name: "disconnected tenant", reply: reply{status: 403, file: "xero/forbidden_403.json"}, kind: Rejected, auth: true, reauth: true,
			says: []string{"xero answered 403", "AuthorizationUnsuccessful"}},
		{name: "minute limit", reply: reply{status: 429, file: "xero/rate_limited_429.json",
			header: map[string]string{"Retry-After": "37", "X-Rate-Limit-Problem": "minute"}},
			kind: Retryable, pause: true, retryAfter: 37 * time.Second, says: []string{"xero answered 429", "rate limit: minute"}},
		{name: "day limit", reply: reply{status: 429, file: "xero/rate_limited_429.json",
			header: map[string]string{"Retry-After": "50400", "X-Rate-Limit-Problem": "day", "X-DayLimit-Remaining": "0"}},
			kind: Retryable, pause: true, daily: true, retryAfter: 14 * time.Hour,
			says: []string{"rate limit: day", "daily call limit of the tenant is used up", "X-DayLimit-Remaining: 0"}},
		{name: "day limit without Retry-After", reply: reply{status: 429, header: map[string]string{"X-Rate-Limit-Problem": "day"}},
			kind: Retryable, pause: true, daily: true, retryAfter: time.Hour, says: []string{"daily call limit"}},
		{name: "day limit, Retry-After past a day", reply: reply{status: 429, header: map[string]string{"Retry-After": "999999", "X-Rate-Limit-Problem": "day"}},
			kind: Retryable, pause: true, daily: true, retryAfter: 24 * time.Hour},
		{name: "concurrent limit", reply: reply{status: 429, header: map[string]string{"Retry-After": "1", "X-Rate-Limit-Problem": "concurrent", "X-DayLimit-Remaining": "4211"}},
			kind: Retryable, pause: true, retryAfter: time.Second, says: []string{"rate limit: concurrent"}},
		{name: "server error", reply: reply{status: 500, file: "xero/server_error_500.json"}, kind: Retryable,
			says: []string{"xero answered 500", "An error occurred"}},
		{name: "unavailable", reply: reply{status: 503, header: map[string]string{"Retry-After": "5"}}, kind: Retryable, retryAfter: 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The same command twice: a retry sends the same Idempotency-Key.
			api := newFakeAPI(t, tt.reply, tt.reply)
			x := newTestXero(t)
			cmd := accountingCommand(testContactID, `{}`, "s-1")
			cmd.IdempotencyKey = strings.Repeat("k", 200)
			var e *Error
			for range 2 {
				_, err := x.PushPurchaseOrder(context.Background(), xeroConn(api, ""), accountingCred(), cmd)
				e = asError(t, err)
			}
			tt.classified(t, e)
			got := api.requests()
			if k := got[0].header.Get("Idempotency-Key"); len(k) > 128 || k != got[1].header.Get("Idempotency-Key") || k != XeroIdempotencyKey(cmd.IdempotencyKey) {
				t.Errorf("Idempotency-Keys %q, %q", k, got[1].header.Get("Idempotency-Key"))
			}
		})
	}
}

// TestXeroRefusesBeforeAnyCall: what can never succeed is refused
// permanently without calling Xero.
func TestXeroRefusesBeforeAnyCall(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	x := newTestXero(t)
	tests := []struct {
		name string
		conn Connection
		cred credential.Credential
		cmd  PurchaseOrderPush
		kind ErrorKind
		says string
	}{
		{"supplier not a GUID", xeroConn(api, ""), accountingCred(), accountingCommand("SUP-1", `{}`, "s-1"), PayloadInvalid, `"SUP-1" is not a Xero ContactID`},
		{"no token", xeroConn(api, ""), credential.Credential{}, accountingCommand(testContactID, `{}`, "s-1"), ConfigInvalid, "no access token"},
		{"no tenant", Connection{Config: json.RawMessage(`{"apiBaseUrl": "` + api.srv.URL + `"}`)}, accountingCred(),
			accountingCommand(testContactID, `{}`, "s-1"), ConfigInvalid, "config_json.tenantId"},
		{"unknown currency", xeroConn(api, ""), accountingCred(),
			func() PurchaseOrderPush {
				c := accountingCommand(testContactID, `{}`, "s-1")
				c.PurchaseOrder = testOrder("ZZZ", "s-1")
				return c
			}(), PayloadInvalid, `"ZZZ"`},
	}
	for _, tt := range tests {
		_, err := x.PushPurchaseOrder(context.Background(), tt.conn, tt.cred, tt.cmd)
		if e := asError(t, err); e.Kind != tt.kind || !strings.Contains(e.Message, tt.says) {
			t.Errorf("%s: %v, want %v saying %q", tt.name, err, tt.kind, tt.says)
		}
	}
	if n := len(api.requests()); n != 0 {
		t.Errorf("%d calls made, want none", n)
	}

	// Without WEBHOOK_ALLOW_PRIVATE_NETWORKS the fake API on loopback is refused.
	guarded := NewXero(AccountingConfig{})
	_, err := guarded.PushPurchaseOrder(context.Background(), xeroConn(api, ""), accountingCred(), accountingCommand(testContactID, `{}`, "s-1"))
	if e := asError(t, err); e.Kind != ConfigInvalid || !strings.Contains(e.Message, "config_json.apiBaseUrl") {
		t.Errorf("loopback apiBaseUrl without the switch = %v", err)
	}
}

// TestXeroTimeoutIsRetryable: a call that outlives the time limit is
// retryable; its retry sends the same key.
func TestXeroTimeoutIsRetryable(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	api := &fakeAPI{t: t, srv: httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))}
	t.Cleanup(api.srv.Close)
	t.Cleanup(func() { close(release) })
	x := NewXero(AccountingConfig{AllowPrivateNetworks: true, Timeout: 100 * time.Millisecond})
	_, err := x.PushPurchaseOrder(context.Background(), xeroConn(api, ""), accountingCred(), accountingCommand(testContactID, `{}`, "s-1"))
	if e := asError(t, err); e.Kind != Retryable || !strings.Contains(e.Message, "timed out") {
		t.Errorf("timeout = %v, want Retryable saying timed out", err)
	}
}
