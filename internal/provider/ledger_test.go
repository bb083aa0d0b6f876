package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"integration-outbox/internal/credential"
)

// The test-only provider of docs/adding-a-provider.md: "ledgerly", a
// fictional accounting API, built only from the core (accounting,
// prepare, accountingClient, pushSupplier, remembered). What it writes is
// what a third provider would: its configuration, its bodies, its calls
// and its reading of the answers; the rest comes with the core.

// ledgerlyConfig is a ledgerly connection's config_json.
type ledgerlyConfig struct {
	BookID       string
	APIBaseURL   *url.URL
	ReplayWindow time.Duration
}

type ledgerlyLedger struct{ c accountingClient }

func newLedgerly(cfg AccountingConfig) *accounting[ledgerlyConfig, ledgerlyLedger] {
	a := newAccounting[ledgerlyConfig]("ledgerly", cfg, func(c accountingClient) ledgerlyLedger { return ledgerlyLedger{c} })
	return &a
}

func (ledgerlyLedger) config(raw json.RawMessage, allowPrivate bool) (ledgerlyConfig, error) {
	fields, err := configFields(raw)
	if err != nil {
		return ledgerlyConfig{}, err
	}
	var c ledgerlyConfig
	if c.BookID, err = configString(fields, "bookId"); err != nil {
		return c, err
	}
	if c.BookID == "" {
		return c, configError("bookId", "required")
	}
	if c.ReplayWindow, err = replayWindow(fields); err != nil {
		return c, err
	}
	c.APIBaseURL, err = configURL(fields, "apiBaseUrl", "https://api.ledgerly.example", allowPrivate)
	return c, err
}

func (ledgerlyLedger) replayWindow(cfg ledgerlyConfig) time.Duration { return cfg.ReplayWindow }

// findOrders asks ledgerly for the orders of the number and keeps the
// supplier's.
func (l ledgerlyLedger) findOrders(ctx context.Context, p prepared[ledgerlyConfig], cmd PurchaseOrderPush, cred credential.Credential) (lookup, error) {
	o, err := parseOrder(cmd.PurchaseOrder)
	if err != nil {
		return lookup{}, err
	}
	target := *p.cfg.APIBaseURL
	target.Path += "/books/" + url.PathEscape(p.cfg.BookID) + "/orders"
	target.RawQuery = url.Values{"number": {o.OrderNumber}}.Encode()
	a, err := l.c.do(ctx, http.MethodGet, &target, "apiBaseUrl", l.c.header(p.auth), nil, cred)
	if err != nil {
		return lookup{}, err
	}
	if a.status < 200 || a.status >= 300 {
		return lookup{}, l.c.statusError(a, "", cred)
	}
	var ans struct {
		Orders []struct{ ID, Supplier string }
	}
	if err := json.Unmarshal(a.body, &ans); err != nil {
		return lookup{}, &Error{Kind: Retryable, StatusCode: a.status, Message: "ledgerly answered a list it cannot read"}
	}
	res := lookup{status: a.status, what: "numbered " + o.OrderNumber}
	for _, f := range ans.Orders {
		if f.Supplier == cmd.ExternalSupplierID {
			res.docs = append(res.docs, found{Document: Document{ID: f.ID}})
		}
	}
	return res, nil
}

func (ledgerlyLedger) orderBody(cfg ledgerlyConfig, cmd PurchaseOrderPush) ([]byte, error) {
	o, err := parseOrder(cmd.PurchaseOrder)
	if err != nil {
		return nil, err
	}
	if cmd.ExternalSupplierID == "" {
		return nil, payloadError("payload_json.externalSupplierId: missing or empty (the ledgerly supplier id)")
	}
	return json.Marshal(map[string]any{"book": cfg.BookID, "supplier": cmd.ExternalSupplierID,
		"number": o.OrderNumber, "lines": len(o.Items)})
}

// call POSTs or GETs under the book and reads {"id"} or a failure.
func (l ledgerlyLedger) call(ctx context.Context, p prepared[ledgerlyConfig], method, path, key string, body []byte,
	cred credential.Credential) (string, answer, error) {
	target := *p.cfg.APIBaseURL
	target.Path += "/books/" + url.PathEscape(p.cfg.BookID) + path
	h := l.c.header(p.auth)
	if body != nil {
		h = l.c.jsonHeader(p.auth)
		h.Set("Idempotency-Key", key)
	}
	a, err := l.c.do(ctx, method, &target, "apiBaseUrl", h, body, cred)
	if err != nil {
		return "", a, err
	}
	if a.status < 200 || a.status >= 300 {
		return "", a, l.c.statusError(a, "", cred)
	}
	var ans struct{ ID string }
	if json.Unmarshal(a.body, &ans) != nil || ans.ID == "" {
		return "", a, &Error{Kind: Retryable, StatusCode: a.status, Message: "ledgerly answered without an id"}
	}
	return ans.ID, a, nil
}

func (l ledgerlyLedger) sendOrder(ctx context.Context, p prepared[ledgerlyConfig], cmd PurchaseOrderPush, cred credential.Credential) (Result, error) {
	path := "/orders"
	if cmd.Document != nil {
		path += "/" + url.PathEscape(cmd.Document.ID)
	}
	id, a, err := l.call(ctx, p, http.MethodPost, path, cmd.IdempotencyKey, p.body, cred)
	if err != nil {
		return Result{}, err
	}
	return remembered(a.status, id, "", ""), nil
}

func (ledgerlyLedger) supplierBody(cfg ledgerlyConfig, cmd SupplierPush) ([]byte, error) {
	limits := supplierLimits{name: fieldLabel{"ledgerly's supplier name", 100}, code: fieldLabel{"ledgerly's code", 20},
		email: fieldLabel{"ledgerly's email", 100}, taxNumber: fieldLabel{"ledgerly's tax id", 20}, phone: fieldLabel{"ledgerly's phone", 30},
		city: fieldLabel{"ledgerly's city", 100}, postalCode: fieldLabel{"ledgerly's postcode", 20},
		country: fieldLabel{"ledgerly's country", 50}, addressLine: fieldLabel{"ledgerly's line %d", 100}, addressLines: "ledgerly keeps 4"}
	if err := limits.check(cmd.Supplier); err != nil {
		return nil, err
	}
	return json.Marshal(map[string]string{"name": cmd.Supplier.Name, "code": cmd.Supplier.Code})
}

func (l ledgerlyLedger) sendSupplier(ctx context.Context, p prepared[ledgerlyConfig], cmd SupplierPush, cred credential.Credential) supplierWrite {
	id, a, err := l.call(ctx, p, http.MethodPost, "/suppliers", cmd.IdempotencyKey, p.body, cred)
	if err != nil {
		// ledgerly answers 409 when the name is another supplier's.
		return supplierWrite{err: err, taken: a.status == http.StatusConflict}
	}
	return supplierWrite{res: remembered(a.status, id, "", "")}
}

func (l ledgerlyLedger) link(ctx context.Context, p prepared[ledgerlyConfig], s Supplier, cred credential.Credential) (Result, error) {
	id, a, err := l.call(ctx, p, http.MethodGet, "/suppliers/by-name/"+s.Name, "", nil, cred)
	if err != nil {
		return Result{}, err
	}
	return remembered(a.status, id, "", SupplierLinked), nil
}

func (ledgerlyLedger) renameRefused(cmd SupplierPush, _ supplierWrite, _ credential.Credential) *Error {
	return &Error{Message: fmt.Sprintf("ledgerly refused to rename supplier %s: another supplier has that name", cmd.Document.ID)}
}

// ledgerlyAPI is the fictional API: it answers each request from a script
// and records what it got.
type ledgerlyAPI struct {
	mu   sync.Mutex
	got  []string // "METHOD path key"
	send func(r *http.Request) (int, string, http.Header)
}

func (api *ledgerlyAPI) start(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		api.mu.Lock()
		api.got = append(api.got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Idempotency-Key"))
		api.mu.Unlock()
		status, body, h := api.send(r)
		for k, v := range h {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestAThirdProviderFromTheCore: the test-only ledgerly provider pushes a
// purchase order (created, then updated through the remembered document),
// refuses a bad config and a payload before any call naming the field, is
// paused by a 429 with its Retry-After, and links a supplier whose name is
// taken: all of it from the core, none written again.
func TestAThirdProviderFromTheCore(t *testing.T) {
	t.Parallel()
	api := &ledgerlyAPI{}
	api.send = func(r *http.Request) (int, string, http.Header) {
		switch {
		case r.Header.Get("Authorization") != "Bearer "+testToken:
			return 401, `{"error":"bad token"}`, nil
		case r.URL.Path == "/books/b-1/orders" && r.Method == http.MethodGet:
			return 200, `{"orders":[{"id":"o-7","supplier":"sup-1"},{"id":"o-8","supplier":"sup-2"}]}`, nil
		case r.URL.Path == "/books/b-1/orders" && r.Header.Get("Idempotency-Key") == "slow":
			return 429, `{"error":"slow down"}`, http.Header{"Retry-After": {"30"}}
		case r.URL.Path == "/books/b-1/orders" || r.URL.Path == "/books/b-1/orders/o-1":
			return 200, `{"id":"o-1"}`, nil
		case r.URL.Path == "/books/b-1/suppliers":
			return 409, `{"error":"name taken"}`, nil
		case r.URL.Path == "/books/b-1/suppliers/by-name/Acme Ltd":
			return 200, `{"id":"s-9"}`, nil
		}
		return 404, `{}`, nil
	}
	base := api.start(t)
	p := newLedgerly(AccountingConfig{AllowPrivateNetworks: true, Timeout: 2 * time.Second})
	var _ PurchaseOrderPusher = p
	var _ SupplierPusher = p
	var _ Limited = p
	conn := Connection{ID: "c-1", Provider: "ledgerly", Config: json.RawMessage(`{"bookId":"b-1","apiBaseUrl":"` + base + `"}`)}
	ctx := context.Background()

	cmd := accountingCommand("sup-1", `{}`, "s-1")
	res, err := p.PushPurchaseOrder(ctx, conn, accountingCred(), cmd)
	if err != nil || res.Status != StatusCompleted || res.Document == nil || res.Document.ID != "o-1" {
		t.Fatalf("create = %+v, %v", res, err)
	}
	cmd.Document, cmd.IdempotencyKey = res.Document, "idem-2"
	if res, err := p.PushPurchaseOrder(ctx, conn, accountingCred(), cmd); err != nil || res.ExternalID != "o-1" {
		t.Fatalf("update = %+v, %v", res, err)
	}

	// A create whose earlier attempt's outcome is unknown, past the
	// replay window: looked up, found, not sent again.
	cmd.Document, cmd.Unknown = nil, &UnknownOutcome{Since: time.Now().Add(-2 * time.Hour)}
	before := len(api.got)
	if res, err := p.PushPurchaseOrder(ctx, conn, accountingCred(), cmd); err != nil || res.ExternalID != "o-7" || res.Action != ActionReconciled {
		t.Fatalf("look-up = %+v, %v, want o-7 reconciled", res, err)
	}
	if got := api.got[before:]; len(got) != 1 || !strings.HasPrefix(got[0], "GET ") {
		t.Errorf("the look-up made %q, want one GET", got)
	}
	cmd.Unknown = nil

	cmd.Document, cmd.IdempotencyKey = nil, "slow"
	_, err = p.PushPurchaseOrder(ctx, conn, accountingCred(), cmd)
	if e := asError(t, err); !e.PauseConnection || e.RetryAfter != 30*time.Second || e.Kind != Retryable {
		t.Errorf("429 = %+v, want the connection paused for 30s", e)
	}

	before = len(api.got)
	bad := Connection{ID: "c-1", Provider: "ledgerly", Config: json.RawMessage(`{"apiBaseUrl":"` + base + `"}`)}
	if err := p.CheckPurchaseOrder(bad, accountingCred(), cmd); asError(t, err).Kind != ConfigInvalid || !strings.Contains(err.Error(), "bookId") {
		t.Errorf("no bookId = %v", err)
	}
	if err := p.CheckPurchaseOrder(conn, accountingCred(), accountingCommand("", `{}`, "s-1")); asError(t, err).Kind != PayloadInvalid ||
		!strings.Contains(err.Error(), "externalSupplierId") {
		t.Errorf("no supplier = %v", err)
	}
	if _, err := p.PushPurchaseOrder(ctx, conn, credential.Credential{}, accountingCommand("sup-1", `{}`, "s-1")); asError(t, err).Kind != ConfigInvalid {
		t.Errorf("no token = %v", err)
	}
	if len(api.got) != before {
		t.Errorf("refusals before any call made %d calls", len(api.got)-before)
	}

	s := testSupplier()
	s.Name = "Acme Ltd"
	linked, err := p.PushSupplier(ctx, conn, accountingCred(), supplierCommand(s))
	if err != nil || linked.Action != SupplierLinked || linked.ExternalID != "s-9" {
		t.Fatalf("a taken name = %+v, %v, want linked to s-9", linked, err)
	}
	renamed := supplierCommand(s)
	renamed.Document = &Document{ID: "s-1"}
	if _, err := p.PushSupplier(ctx, conn, accountingCred(), renamed); asError(t, err).Kind != Rejected {
		t.Errorf("a rename onto a taken name = %v, want Rejected", err)
	}
	if p.Name() != "ledgerly" || p.Limits(conn).CallsPerMinute < 0 {
		t.Errorf("name %q", p.Name())
	}
}
