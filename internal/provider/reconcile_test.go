package provider

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// unknownSince is an UnknownOutcome whose first attempt started ago, on
// the tests' clock (testAccountingConfig).
func unknownSince(ago time.Duration) *UnknownOutcome {
	return &UnknownOutcome{Since: testNow.Add(-ago)}
}

// TestXeroLooksUpACreateWhoseOutcomeIsUnknown: past the replay window, a
// create whose earlier attempt's outcome is unknown lists the purchase
// orders of its date first. The one with its Reference and ContactID (not
// another contact's, not a DELETED one, not another Reference) completes
// the push as reconciled, no POST; none found, the create follows, paced;
// two found, Duplicate naming both, no POST; inside the window, or with no
// unknown attempt, no look-up at all.
func TestXeroLooksUpACreateWhoseOutcomeIsUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cmd := accountingCommand(testContactID, `{}`, "s-1")

	t.Run("found", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t, reply{status: 200, file: "xero/purchase_orders_found.json"})
		c := cmd
		c.Unknown = unknownSince(2 * time.Hour)
		res, err := newTestXero(t).PushPurchaseOrder(ctx, xeroConn(api, ""), accountingCred(), c)
		if err != nil || res.Status != StatusCompleted || res.Action != ActionReconciled || res.ExternalID != testXeroPOID ||
			res.Document == nil || res.Document.ID != testXeroPOID {
			t.Fatalf("look-up = %+v, %v, want %s reconciled", res, err, testXeroPOID)
		}
		got := api.requests()
		if len(got) != 1 || got[0].method != http.MethodGet || got[0].path != "/api.xro/2.0/PurchaseOrders" {
			t.Fatalf("requests %+v, want one GET /PurchaseOrders", got)
		}
		// The order's createdAt is 2026-12-03T23:30-02:00: its Date, as
		// sent, is 2026-12-04 (UTC).
		q := got[0].query
		if q.Get("DateFrom") != "2026-12-04" || q.Get("DateTo") != "2026-12-04" || q.Get("page") != "1" ||
			got[0].header.Get("xero-tenant-id") != "tenant-7" || got[0].header.Get("Idempotency-Key") != "" {
			t.Errorf("look-up query %v, headers %v", q, got[0].header)
		}
	})

	t.Run("none, then the create, paced", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t, reply{status: 200, file: "xero/purchase_orders_none.json"}, reply{status: 200, file: "xero/created.json"})
		c := cmd
		c.Unknown = &UnknownOutcome{Since: testNow.Add(-time.Minute), Rerun: true}
		gates := 0
		gctx := WithCallGate(ctx, func(context.Context) error { gates++; return nil })
		res, err := newTestXero(t).PushPurchaseOrder(gctx, xeroConn(api, ""), accountingCred(), c)
		if err != nil || res.Action != "" || res.ExternalID != testXeroPOID {
			t.Fatalf("create after an empty look-up = %+v, %v", res, err)
		}
		if got := api.requests(); len(got) != 2 || got[0].method != http.MethodGet || got[1].method != http.MethodPost ||
			got[1].header.Get("Idempotency-Key") != "idem-1" {
			t.Errorf("requests %+v, want the GET then the POST with our key", got)
		}
		if gates != 1 {
			t.Errorf("the call gate was waited on %d times, want once (before the create)", gates)
		}
	})

	t.Run("the gate refuses the create", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t, reply{status: 200, file: "xero/purchase_orders_none.json"})
		c := cmd
		c.Unknown = unknownSince(2 * time.Hour)
		busy := errors.New("connection busy")
		_, err := newTestXero(t).PushPurchaseOrder(WithCallGate(ctx, func(context.Context) error { return busy }),
			xeroConn(api, ""), accountingCred(), c)
		if !errors.Is(err, busy) || len(api.requests()) != 1 {
			t.Errorf("err %v after %d requests, want the gate's error and no create", err, len(api.requests()))
		}
	})

	t.Run("two", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t, reply{status: 200, file: "xero/purchase_orders_two.json"})
		c := cmd
		c.Unknown = unknownSince(25 * time.Hour)
		_, err := newTestXero(t).PushPurchaseOrder(ctx, xeroConn(api, ""), accountingCred(), c)
		e := asError(t, err)
		if e.Kind != Duplicate || !strings.Contains(e.Message, testXeroPOID) || !strings.Contains(e.Message, "4b5c6d7e-8f90-4a1b-8c2d-3e4f5a6b7c8d") {
			t.Errorf("two matches = %+v, want Duplicate naming both", e)
		}
		if len(api.requests()) != 1 {
			t.Errorf("%d requests, want the look-up only", len(api.requests()))
		}
	})

	t.Run("paged", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t, reply{status: 200, file: "xero/purchase_orders_page1of2.json"}, reply{status: 200, file: "xero/purchase_orders_page2of2.json"})
		c := cmd
		c.Unknown = unknownSince(2 * time.Hour)
		gates := 0
		res, err := newTestXero(t).PushPurchaseOrder(WithCallGate(ctx, func(context.Context) error { gates++; return nil }),
			xeroConn(api, ""), accountingCred(), c)
		if err != nil || res.Action != ActionReconciled || res.ExternalID != testXeroPOID {
			t.Fatalf("paged look-up = %+v, %v", res, err)
		}
		if got := api.requests(); len(got) != 2 || got[1].query.Get("page") != "2" || gates != 1 {
			t.Errorf("requests %+v, gate %d: want page 2 read after one wait", got, gates)
		}
	})

	t.Run("no look-up inside the window or without an unknown attempt", func(t *testing.T) {
		t.Parallel()
		for _, u := range []*UnknownOutcome{nil, unknownSince(10 * time.Minute)} {
			api := newFakeAPI(t, reply{status: 200, file: "xero/created.json"})
			c := cmd
			c.Unknown = u
			if _, err := newTestXero(t).PushPurchaseOrder(ctx, xeroConn(api, ""), accountingCred(), c); err != nil {
				t.Fatal(err)
			}
			if got := api.requests(); len(got) != 1 || got[0].method != http.MethodPost {
				t.Errorf("unknown %+v: requests %+v, want the create alone", u, got)
			}
		}
	})

	t.Run("window 0 always looks up", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t, reply{status: 200, file: "xero/purchase_orders_found.json"})
		c := cmd
		c.Unknown = unknownSince(time.Second)
		res, err := newTestXero(t).PushPurchaseOrder(ctx, xeroConn(api, `, "replayWindowSeconds": 0`), accountingCred(), c)
		if err != nil || res.Action != ActionReconciled {
			t.Errorf("window 0 = %+v, %v, want the look-up", res, err)
		}
	})

	t.Run("a 429 on the look-up pauses the connection", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t, reply{status: 429, header: map[string]string{"Retry-After": "40", "X-Rate-Limit-Problem": "minute"},
			file: "xero/rate_limited_429.json"})
		c := cmd
		c.Unknown = unknownSince(2 * time.Hour)
		_, err := newTestXero(t).PushPurchaseOrder(ctx, xeroConn(api, ""), accountingCred(), c)
		e := asError(t, err)
		if !e.PauseConnection || e.RetryAfter != 40*time.Second || !e.OutcomeUnknown || !strings.Contains(e.Message, "looking up") {
			t.Errorf("429 = %+v, want a pause of 40s that keeps the outcome unknown", e)
		}
		if len(api.requests()) != 1 {
			t.Errorf("%d requests, want no create", len(api.requests()))
		}
	})
}

// TestACreateThatMayHaveMadeTheDocumentIsOutcomeUnknown: a create
// answered 5xx or cut off is OutcomeUnknown; a 400, a 429 and an update
// are not.
func TestACreateThatMayHaveMadeTheDocumentIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		r       reply
		doc     bool
		unknown bool
	}{
		{"500", reply{status: 500, file: "xero/server_error_500.json"}, false, true},
		{"400", reply{status: 400, file: "xero/validation_400.json"}, false, false},
		{"429", reply{status: 429, header: map[string]string{"Retry-After": "5"}, file: "xero/rate_limited_429.json"}, false, false},
		{"500 on an update", reply{status: 500, file: "xero/server_error_500.json"}, true, false},
	} {
		api := newFakeAPI(t, tc.r)
		c := accountingCommand(testContactID, `{}`, "s-1")
		if tc.doc {
			c.Document = &Document{ID: testXeroPOID}
		}
		_, err := newTestXero(t).PushPurchaseOrder(ctx, xeroConn(api, ""), accountingCred(), c)
		if e := asError(t, err); e.OutcomeUnknown != tc.unknown {
			t.Errorf("%s: OutcomeUnknown %v, want %v (%v)", tc.name, e.OutcomeUnknown, tc.unknown, e)
		}
	}
	// Cut off: the connection closes before any answer.
	x := NewXero(AccountingConfig{AllowPrivateNetworks: true, Timeout: 100 * time.Millisecond})
	hang := newFakeAPI(t)
	hang.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { time.Sleep(300 * time.Millisecond) })
	_, err := x.PushPurchaseOrder(ctx, xeroConn(hang, ""), accountingCred(), accountingCommand(testContactID, `{}`, "s-1"))
	if e := asError(t, err); !e.OutcomeUnknown || e.Kind != Retryable {
		t.Errorf("time-out = %+v, want Retryable OutcomeUnknown", e)
	}
}

// TestQuickBooksLooksUpACreateWhoseOutcomeIsUnknown: the look-up is a
// query by DocNumber; the purchase order of the vendor, with its
// SyncToken, is the push's; another vendor's is not; two of the vendor
// are Duplicate; none, the create follows.
func TestQuickBooksLooksUpACreateWhoseOutcomeIsUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cmd := accountingCommand("41", `{}`, "s-1")
	cmd.Unknown = unknownSince(2 * time.Hour)

	api := newFakeAPI(t, reply{status: 200, file: "quickbooks/purchase_order_query.json"})
	res, err := newTestQuickBooks(t).PushPurchaseOrder(ctx, quickBooksConn(api), accountingCred(), cmd)
	if err != nil || res.Action != ActionReconciled || res.ExternalID != "177" || res.Document == nil || *res.Document != (Document{ID: "177", SyncToken: "2"}) {
		t.Fatalf("look-up = %+v, %v, want 177 (SyncToken 2) reconciled", res, err)
	}
	got := api.requests()
	if len(got) != 1 || got[0].method != http.MethodGet || got[0].path != "/v3/company/9130/query" ||
		got[0].query.Get("query") != "select * from PurchaseOrder where DocNumber = 'PO-1001'" || got[0].query.Get("minorversion") == "" {
		t.Fatalf("requests %+v, want one query by DocNumber", got)
	}

	two := newFakeAPI(t, reply{status: 200, file: "quickbooks/purchase_order_query_two.json"})
	_, err = newTestQuickBooks(t).PushPurchaseOrder(ctx, quickBooksConn(two), accountingCred(), cmd)
	if e := asError(t, err); e.Kind != Duplicate || !strings.Contains(e.Message, "177") || !strings.Contains(e.Message, "179") {
		t.Errorf("two = %+v, want Duplicate naming 177 and 179", e)
	}

	none := newFakeAPI(t, reply{status: 200, file: "quickbooks/purchase_order_query_empty.json"}, reply{status: 200, file: "quickbooks/created.json"})
	if res, err := newTestQuickBooks(t).PushPurchaseOrder(ctx, quickBooksConn(none), accountingCred(), cmd); err != nil || res.Action != "" {
		t.Fatalf("none = %+v, %v, want the create", res, err)
	}
	if got := none.requests(); len(got) != 2 || got[1].method != http.MethodPost {
		t.Errorf("requests %+v, want the query then the create", got)
	}

	// A quote in the number is escaped as QuickBooks' query language wants.
	quoted := newFakeAPI(t, reply{status: 200, file: "quickbooks/purchase_order_query_empty.json"}, reply{status: 200, file: "quickbooks/created.json"})
	c := cmd
	c.PurchaseOrder = json.RawMessage(strings.Replace(string(cmd.PurchaseOrder), `"PO-1001"`, `"O'Neil-1"`, 1))
	if _, err := newTestQuickBooks(t).PushPurchaseOrder(ctx, quickBooksConn(quoted), accountingCred(), c); err != nil {
		t.Fatal(err)
	}
	if q := quoted.requests()[0].query.Get("query"); q != `select * from PurchaseOrder where DocNumber = 'O\'Neil-1'` {
		t.Errorf("query %q", q)
	}
}

// TestReplayWindowSecondsIsChecked: config_json.replayWindowSeconds is a
// whole number of seconds from 0 to a week; anything else is refused
// before any call, naming the field.
func TestReplayWindowSecondsIsChecked(t *testing.T) {
	t.Parallel()
	for _, v := range []string{`-1`, `1.5`, `"600"`, `604801`} {
		raw := json.RawMessage(`{"tenantId":"t","replayWindowSeconds":` + v + `}`)
		if _, err := ParseXeroConfig(raw, false); err == nil || !strings.Contains(err.Error(), "config_json.replayWindowSeconds") {
			t.Errorf("xero %s: %v", v, err)
		}
		raw = json.RawMessage(`{"realmId":"1","replayWindowSeconds":` + v + `}`)
		if _, err := ParseQuickBooksConfig(raw, false); err == nil || !strings.Contains(err.Error(), "config_json.replayWindowSeconds") {
			t.Errorf("quickbooks %s: %v", v, err)
		}
	}
	for v, want := range map[string]time.Duration{`0`: 0, `null`: DefaultReplayWindow, `86400`: 24 * time.Hour} {
		c, err := ParseXeroConfig(json.RawMessage(`{"tenantId":"t","replayWindowSeconds":`+v+`}`), false)
		if err != nil || c.ReplayWindow != want {
			t.Errorf("%s: %v, %v", v, c.ReplayWindow, err)
		}
	}
	if c, _ := ParseQuickBooksConfig(json.RawMessage(`{"realmId":"1"}`), false); c.ReplayWindow != DefaultReplayWindow {
		t.Errorf("default %v", c.ReplayWindow)
	}
}
