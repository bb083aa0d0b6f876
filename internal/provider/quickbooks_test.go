package provider

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

func newTestQuickBooks(t *testing.T) *QuickBooks {
	t.Helper()
	q := NewQuickBooks(testAccountingConfig)
	t.Cleanup(q.CloseIdleConnections)
	return q
}

func quickBooksConn(api *fakeAPI) Connection {
	return Connection{ID: "conn-1", Provider: NameQuickBooks, Config: json.RawMessage(`{"realmId": "9130", "expenseAccountId": "80",
		"apiBaseUrl": "` + api.srv.URL + `"}`)}
}

// qboBody is what the tests read of a request body.
type qboBody struct {
	ID, SyncToken string
	Sparse        bool `json:"sparse"`
	VendorRef     qboRef
	CurrencyRef   qboRef
	DocNumber     string
	TxnDate       string
	Line          []struct {
		DetailType                 string
		Amount                     json.Number
		ItemBasedExpenseLineDetail *struct {
			ItemRef        qboRef
			Qty, UnitPrice json.Number
		}
		AccountBasedExpenseLineDetail *struct{ AccountRef qboRef }
	}
}

func decodeQBOBody(t *testing.T, b []byte) qboBody {
	t.Helper()
	var body qboBody
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	if err := dec.Decode(&body); err != nil {
		t.Fatal(err)
	}
	return body
}

// TestQuickBooksCreatesThenSparselyUpdates: the first push creates the
// purchase order under a requestid derived from our key; Id and SyncToken
// are the document to remember; a push that knows them sends a sparse
// update. Both bodies are valid in Intuit's data model (qboschema).
func TestQuickBooksCreatesThenSparselyUpdates(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, reply{status: 200, file: "quickbooks/created.json"}, reply{status: 200, file: "quickbooks/updated.json"})
	q := newTestQuickBooks(t)
	cmd := accountingCommand("41", `{"items": {"s-1": {"itemId": "7"}}}`, "s-1", "s-2")
	cmd.PurchaseOrder = testOrder("JPY", "s-1", "s-2")

	res, err := q.PushPurchaseOrder(context.Background(), quickBooksConn(api), accountingCred(), cmd)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != StatusCompleted || res.ExternalID != "257" || res.Document == nil || *res.Document != (Document{ID: "257", SyncToken: "0"}) {
		t.Errorf("result = %+v", res)
	}
	cmd.IdempotencyKey = "idem-2"
	cmd.Document = res.Document
	if res, err = q.PushPurchaseOrder(context.Background(), quickBooksConn(api), accountingCred(), cmd); err != nil ||
		*res.Document != (Document{ID: "257", SyncToken: "1"}) {
		t.Fatalf("update = %+v, %v", res, err)
	}

	got := api.requests()
	if len(got) != 2 {
		t.Fatalf("%d requests, want 2", len(got))
	}
	for i, r := range got {
		validQBO(t, "PurchaseOrder", r.body)
		if r.method != http.MethodPost || r.path != "/v3/company/9130/purchaseorder" || r.query.Get("minorversion") != "75" ||
			r.header.Get("Authorization") != "Bearer "+testToken || r.header.Get("Accept") != "application/json" {
			t.Errorf("request %d: %s %s %v %v", i, r.method, r.path, r.query, r.header)
		}
	}
	if got[0].query.Get("requestid") != "idem-1" || got[1].query.Get("requestid") != "idem-2" {
		t.Errorf("requestids %q, %q", got[0].query.Get("requestid"), got[1].query.Get("requestid"))
	}
	create := decodeQBOBody(t, got[0].body)
	if create.ID != "" || create.Sparse || create.VendorRef.Value != "41" || create.CurrencyRef.Value != "JPY" ||
		create.DocNumber != "PO-1001" || create.TxnDate != "2026-12-04" || len(create.Line) != 2 {
		t.Errorf("create body = %s", got[0].body)
	}
	// JPY has no minor unit: 1999 yen each, 2.5 of them are 4997.5 → 4998.
	item, account := create.Line[0], create.Line[1]
	if d := item.ItemBasedExpenseLineDetail; item.DetailType != "ItemBasedExpenseLineDetail" || d == nil || d.ItemRef.Value != "7" ||
		d.Qty != "2.5" || d.UnitPrice != "1999" || item.Amount != "4998" {
		t.Errorf("item line = %+v", item)
	}
	if d := account.AccountBasedExpenseLineDetail; account.DetailType != "AccountBasedExpenseLineDetail" || d == nil || d.AccountRef.Value != "80" {
		t.Errorf("account line = %+v", account)
	}
	if update := decodeQBOBody(t, got[1].body); update.ID != "257" || update.SyncToken != "0" || !update.Sparse {
		t.Errorf("update body = %s", got[1].body)
	}
}

// TestQuickBooksStaleSyncTokenIsReadOnceAndRetried: a 5010 on the update
// reads the purchase order's SyncToken and sends the update once more under
// a requestid of its own.
func TestQuickBooksStaleSyncTokenIsReadOnceAndRetried(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, reply{status: 400, file: "quickbooks/stale_400.json"}, reply{status: 200, file: "quickbooks/read.json"},
		reply{status: 200, file: "quickbooks/updated_after_stale.json"})
	q := newTestQuickBooks(t)
	cmd := accountingCommand("41", `{}`, "s-1")
	cmd.Document = &Document{ID: "257", SyncToken: "1"}
	res, err := q.PushPurchaseOrder(context.Background(), quickBooksConn(api), accountingCred(), cmd)
	if err != nil || *res.Document != (Document{ID: "257", SyncToken: "4"}) || res.ExternalID != "257" {
		t.Fatalf("result = %+v, %v", res, err)
	}
	got := api.requests()
	if len(got) != 3 {
		t.Fatalf("%d requests, want 3", len(got))
	}
	if r := got[1]; r.method != http.MethodGet || r.path != "/v3/company/9130/purchaseorder/257" || r.query.Get("minorversion") != "75" ||
		r.header.Get("Authorization") != "Bearer "+testToken {
		t.Errorf("read: %s %s %v", r.method, r.path, r.query)
	}
	first, retry := decodeQBOBody(t, got[0].body), decodeQBOBody(t, got[2].body)
	if first.SyncToken != "1" || retry.SyncToken != "3" || !retry.Sparse || retry.ID != "257" {
		t.Errorf("sync tokens sent: %q then %q", first.SyncToken, retry.SyncToken)
	}
	validQBO(t, "PurchaseOrder", got[2].body)
	r1, r2 := got[0].query.Get("requestid"), got[2].query.Get("requestid")
	if r1 != "idem-1" || r2 == r1 || len(r2) > 50 || r2 != QuickBooksRequestID("idem-1#synctoken=3") {
		t.Errorf("requestids %q then %q", r1, r2)
	}

	// Stale again after the re-read: retryable, no third POST.
	api = newFakeAPI(t, reply{status: 400, file: "quickbooks/stale_400.json"}, reply{status: 200, file: "quickbooks/read.json"},
		reply{status: 400, file: "quickbooks/stale_400.json"})
	_, err = q.PushPurchaseOrder(context.Background(), quickBooksConn(api), accountingCred(), cmd)
	if e := asError(t, err); e.Kind != Retryable || !strings.Contains(e.Message, "5010 Stale Object Error") {
		t.Errorf("stale twice = %v, want Retryable quoting 5010", err)
	}
	// A create is never re-read: 5010 cannot concern it, and it is refused as answered.
	api = newFakeAPI(t, reply{status: 400, file: "quickbooks/stale_400.json"})
	cmd.Document = nil
	if _, err = q.PushPurchaseOrder(context.Background(), quickBooksConn(api), accountingCred(), cmd); asError(t, err).Kind != Rejected || len(api.requests()) != 1 {
		t.Errorf("5010 on a create = %v after %d requests", err, len(api.requests()))
	}
}

// TestQuickBooksAnswers: each documented failure, a Fault in a 200
// included, is classified where it is born and quotes QuickBooks' own
// message, never the token.
func TestQuickBooksAnswers(t *testing.T) {
	t.Parallel()
	tests := []answerCase{
		{name: "validation fault", reply: reply{status: 400, file: "quickbooks/validation_400.json"}, kind: Rejected,
			says: []string{"quickbooks answered 400", "ValidationFault", "2500 Invalid Reference Id", "restore Vendor 99"}},
		{name: "fault in a 200", reply: reply{status: 200, file: "quickbooks/fault_200.json"}, kind: Rejected,
			says: []string{"quickbooks answered 200 with a Fault", "6140 Duplicate Document Number Error"}},
		{name: "expired token", reply: reply{status: 401, file: "quickbooks/unauthorized_401.json"}, kind: Rejected, auth: true,
			says: []string{"quickbooks answered 401", "AUTHENTICATION", "AuthenticationFailed"}},
		{name: "authorization failed", reply: reply{status: 403, file: "quickbooks/forbidden_403.json"}, kind: Rejected, auth: true, reauth: true,
			says: []string{"quickbooks answered 403", "ApplicationAuthorizationFailed"}},
		{name: "throttled", reply: reply{status: 429, file: "quickbooks/throttled_429.json", header: map[string]string{"Retry-After": "60"}},
			kind: Retryable, pause: true, retryAfter: time.Minute, says: []string{"quickbooks answered 429", "ThrottleExceeded"}},
		{name: "throttled without Retry-After", reply: reply{status: 429, file: "quickbooks/throttled_429.json"}, kind: Retryable, pause: true,
			retryAfter: time.Minute},
		{name: "system fault", reply: reply{status: 500, file: "quickbooks/server_error_500.json"}, kind: Retryable,
			says: []string{"quickbooks answered 500", "SystemFault", "10000"}},
		{name: "gateway", reply: reply{status: 502}, kind: Retryable, says: []string{"quickbooks answered 502"}},
		{name: "created without an Id", reply: reply{status: 200, file: "quickbooks/read.json"}, kind: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, tt.reply, tt.reply)
			q := newTestQuickBooks(t)
			cmd := accountingCommand("41", `{}`, "s-1")
			cmd.IdempotencyKey = strings.Repeat("k", 80)
			var errs [2]error
			for i := range errs {
				_, errs[i] = q.PushPurchaseOrder(context.Background(), quickBooksConn(api), accountingCred(), cmd)
			}
			got := api.requests()
			if r := got[0].query.Get("requestid"); len(r) > 50 || r != got[1].query.Get("requestid") {
				t.Errorf("requestids %q, %q: want the same, at most 50 characters", r, got[1].query.Get("requestid"))
			}
			if tt.kind == 0 { // read.json answers a PurchaseOrder with an Id: a success
				if errs[0] != nil {
					t.Errorf("error = %v", errs[0])
				}
				return
			}
			e := asError(t, errs[0])
			tt.classified(t, e)
		})
	}
}

// TestQuickBooksRefusesBeforeAnyCall: a DocNumber QuickBooks cannot take is
// refused, not cut (a cut number could name another order).
func TestQuickBooksRefusesBeforeAnyCall(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	q := newTestQuickBooks(t)
	cmd := accountingCommand("41", `{}`, "s-1")
	cmd.PurchaseOrder = json.RawMessage(strings.Replace(string(cmd.PurchaseOrder), "PO-1001", "PO-2026-12-03-LOC-0001", 1))
	_, err := q.PushPurchaseOrder(context.Background(), quickBooksConn(api), accountingCred(), cmd)
	if e := asError(t, err); e.Kind != PayloadInvalid || !strings.Contains(e.Message, "at most 21") {
		t.Errorf("22-character order number = %v, want PayloadInvalid", err)
	}
	cmd = accountingCommand("41", `{}`, "s-1")
	conn := quickBooksConn(api)
	conn.Config = json.RawMessage(`{"realmId": "9130", "apiBaseUrl": "` + api.srv.URL + `"}`)
	if _, err := q.PushPurchaseOrder(context.Background(), conn, accountingCred(), cmd); asError(t, err).Kind != PayloadInvalid ||
		!strings.Contains(err.Error(), "stock item s-1") {
		t.Errorf("no mapping, no expenseAccountId = %v", err)
	}
	if n := len(api.requests()); n != 0 {
		t.Errorf("%d calls made, want none", n)
	}
}
