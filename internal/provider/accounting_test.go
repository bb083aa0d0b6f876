package provider

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"integration-outbox/internal/credential"
)

// Fixtures shared by the accounting provider tests.
const (
	testContactID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	testXeroPOID  = "8c1b7e52-3d4f-4a6b-9c8d-7e6f5a4b3c2d"
)

// reply is one scripted answer of a fake provider API: a status, headers
// and a fixture file under testdata (empty: no body).
type reply struct {
	status int
	header map[string]string
	file   string
}

// seen is one request the fake API got.
type seen struct {
	method string
	path   string
	query  url.Values
	header http.Header
	body   []byte
}

// fakeAPI replays documented answers in order, in process, and keeps the
// requests it got. A request beyond the script fails the test.
type fakeAPI struct {
	t       *testing.T
	mu      sync.Mutex
	replies []reply
	got     []seen
	srv     *httptest.Server
}

func newFakeAPI(t *testing.T, replies ...reply) *fakeAPI {
	t.Helper()
	f := &fakeAPI{t: t, replies: replies}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.got = append(f.got, seen{method: r.Method, path: r.URL.Path, query: r.URL.Query(), header: r.Header.Clone(), body: body})
	n := len(f.got)
	f.mu.Unlock()
	if n > len(f.replies) {
		f.t.Errorf("unexpected request %d: %s %s", n, r.Method, r.URL)
		w.WriteHeader(http.StatusTeapot)
		return
	}
	rp := f.replies[n-1]
	for k, v := range rp.header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rp.status)
	if rp.file != "" {
		b, err := os.ReadFile(filepath.Join("testdata", rp.file))
		if err != nil {
			f.t.Error(err)
		}
		w.Write(b)
	}
}

func (f *fakeAPI) requests() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.got...)
}

// accountingCred is an OAuth2 access token as the credential carries it.
func accountingCred() credential.Credential {
	return credential.Credential{Token: credential.NewSecret(testToken)}
}

// testOrder is an order document as internal/purchaseorder builds it, in
// currency cur, with lines of the given stock item ids.
func testOrder(cur string, stockItems ...string) json.RawMessage {
	var items []string
	for i, s := range stockItems {
		items = append(items, `{"id":"l-`+string(rune('1'+i))+`","stockItemId":"`+s+`","quantity":2.5,"unitCode":"case","unitPriceMinor":1999}`)
	}
	return json.RawMessage(`{"id":"po-1","orderNumber":"PO-1001","currencyCode":"` + cur +
		`","createdAt":"2026-12-03T23:30:00.123456-02:00","items":[` + strings.Join(items, ",") + `]}`)
}

// accountingCommand is a push of testOrder through an accounting provider.
func accountingCommand(supplier, payload string, stockItems ...string) PurchaseOrderPush {
	return PurchaseOrderPush{CommandType: "push_purchase_order", IdempotencyKey: "idem-1",
		ExternalSupplierID: supplier, PurchaseOrder: testOrder("USD", stockItems...), Payload: json.RawMessage(payload)}
}

// compileSchema compiles one of our JSON Schemas under testdata.
func compileSchema(t *testing.T, name string) *jsonschema.Schema {
	return compileSchemaFile(t, filepath.Join("testdata", name))
}

// compileSchemaFile compiles the JSON Schema at path.
func compileSchemaFile(t *testing.T, path string) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	name := filepath.Base(path)
	if err := c.AddResource(name, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(name)
	if err != nil {
		t.Fatalf("compiling %s: %v", path, err)
	}
	return s
}

// validBody fails the test unless body is valid against schema s.
func validBody(t *testing.T, s *jsonschema.Schema, body []byte) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("request body is not JSON: %v\n%s", err, body)
	}
	if err := s.Validate(v); err != nil {
		t.Errorf("request body does not match %s: %v\n%s", s.Location, err, body)
	}
}

func TestAmountsInTheCurrencysMinorUnit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		currency, minor, want, line string // line: 2.5 × the price
	}{
		{"JPY", "1999", "1999", "4998"}, // 4997.5 rounds half away from zero
		{"USD", "1999", "19.99", "49.98"},
		{"USD", "5", "0.05", "0.13"},
		{"USD", "-250", "-2.50", "-6.25"},
		{"KWD", "1999", "1.999", "4.998"},
		{"KWD", "123456789012345678", "123456789012345.678", "308641972530864.195"},
		{"EUR", "0", "0.00", "0.00"},
	}
	for _, tt := range tests {
		m, err := currencyOf(tt.currency)
		if err != nil {
			t.Fatalf("currencyOf(%s): %v", tt.currency, err)
		}
		got, err := m.amount(json.Number(tt.minor))
		if err != nil || got != tt.want {
			t.Errorf("%s %s minor units = %q, %v; want %q", tt.currency, tt.minor, got, err, tt.want)
		}
		line, err := m.lineAmount("2.5", json.Number(tt.minor))
		if err != nil || line != tt.line {
			t.Errorf("%s 2.5 × %s minor units = %q, %v; want %q", tt.currency, tt.minor, line, err, tt.line)
		}
	}
	for _, code := range []string{"ZZZ", "usd", "XXX", "", "EURO"} {
		_, err := currencyOf(code)
		if e := asError(t, err); e.Kind != PayloadInvalid || !strings.Contains(e.Message, `"`+code+`"`) {
			t.Errorf("currencyOf(%q) = %v, want PayloadInvalid naming it", code, err)
		}
	}
	usd, _ := currencyOf("USD")
	for _, minor := range []string{"19.99", "1e3", "abc"} {
		if _, err := usd.amount(json.Number(minor)); asError(t, err).Kind != PayloadInvalid {
			t.Errorf("amount(%q) = %v, want PayloadInvalid", minor, err)
		}
	}
	for _, q := range []string{"-1", "x", ""} {
		if _, err := quantity(json.Number(q)); err == nil {
			t.Errorf("quantity(%q) accepted", q)
		}
	}
}

func TestGUID(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		testContactID: true, strings.ToUpper(testContactID): true,
		"0a1b2c3d4e5f4a6b8c7d9e0f1a2b3c4d": false, "{" + testContactID + "}": false,
		testContactID + " ": false, "SUP-1": false, "": false, "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4g": false,
	} {
		if got := isGUID(s); got != want {
			t.Errorf("isGUID(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestKeyDerivation(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", 300)
	tests := []struct {
		name, key string
		derive    func(string) string
		max       int
	}{
		{"xero short", "po-1:push:v1", XeroIdempotencyKey, 128},
		{"xero at the limit", strings.Repeat("x", 128), XeroIdempotencyKey, 128},
		{"xero long", long, XeroIdempotencyKey, 128},
		{"quickbooks short", "po-1:push:v1", QuickBooksRequestID, 50},
		{"quickbooks at the limit", strings.Repeat("q", 50), QuickBooksRequestID, 50},
		{"quickbooks long", long, QuickBooksRequestID, 50},
	}
	for _, tt := range tests {
		got := tt.derive(tt.key)
		switch {
		case len(got) > tt.max:
			t.Errorf("%s: %d characters, more than %d", tt.name, len(got), tt.max)
		case len(tt.key) <= tt.max && got != tt.key:
			t.Errorf("%s: %q, want the key itself", tt.name, got)
		case len(tt.key) > tt.max && (!strings.HasPrefix(got, "io-") || len(got) != min(tt.max, 3+64)):
			t.Errorf("%s: %q, want io- and the SHA-256 hex cut to %d", tt.name, got, tt.max)
		case tt.derive(tt.key) != got:
			t.Errorf("%s: not deterministic", tt.name)
		}
	}
	if XeroIdempotencyKey(long) == XeroIdempotencyKey(long+"2") || QuickBooksRequestID(long) == QuickBooksRequestID(long+"2") {
		t.Error("two long keys derived the same key")
	}
}

func TestConnectionLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		provider, config string
		want             Limits
		bad              string // the field an error must name
	}{
		{NameXero, `{}`, Limits{5, 60}, ""},
		{NameQuickBooks, `{}`, Limits{10, 500}, ""},
		{NameXero, `{"maxInFlight": 2, "callsPerMinute": 30}`, Limits{2, 30}, ""},
		{NameQuickBooks, `{"maxInFlight": null}`, Limits{10, 500}, ""},
		{NameXero, `{"maxInFlight": 0}`, Limits{}, "maxInFlight"},
		{NameXero, `{"maxInFlight": -1}`, Limits{}, "maxInFlight"},
		{NameQuickBooks, `{"callsPerMinute": 1.5}`, Limits{}, "callsPerMinute"},
		{NameQuickBooks, `{"callsPerMinute": "60"}`, Limits{}, "callsPerMinute"},
		{NameWebhook, `{}`, Limits{}, "webhook"},
	}
	for _, tt := range tests {
		got, err := ConnectionLimits(tt.provider, json.RawMessage(tt.config))
		if tt.bad != "" {
			if e := asError(t, err); e.Kind != ConfigInvalid || !strings.Contains(e.Message, tt.bad) {
				t.Errorf("%s %s: %v, want ConfigInvalid naming %s", tt.provider, tt.config, err, tt.bad)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s %s = %+v, %v; want %+v", tt.provider, tt.config, got, err, tt.want)
		}
	}
}

// TestItemMapping: each line is the mapped item, the mapped account or the
// connection's default account; a line with none of them is refused naming
// its stock item, before any call.
func TestItemMapping(t *testing.T) {
	t.Parallel()
	const payload = `{"externalSupplierId": "x", "items": {
		"s-item": {"itemCode": "WIDGET", "itemId": "7", "description": "Widgets by the case"},
		"s-acct": {"accountCode": "310", "accountId": "81"}}}`
	type xeroLine struct{ ItemCode, AccountCode, Description string }
	type qboLine struct {
		DetailType                    string
		ItemBasedExpenseLineDetail    *struct{ ItemRef qboRef }
		AccountBasedExpenseLineDetail *struct{ AccountRef qboRef }
	}
	tests := []struct {
		name           string
		items          []string
		defaultAccount string
		xero           []xeroLine
		qbo            []string // "item:<id>" or "account:<id>"
		refused        string   // the stock item a refusal names
	}{
		{"mapped item", []string{"s-item"}, "", []xeroLine{{ItemCode: "WIDGET", Description: "Widgets by the case"}}, []string{"item:7"}, ""},
		{"mapped account", []string{"s-acct"}, "", []xeroLine{{AccountCode: "310", Description: "Stock item s-acct (case)"}}, []string{"account:81"}, ""},
		{"default account", []string{"s-none"}, "300", []xeroLine{{AccountCode: "300", Description: "Stock item s-none (case)"}}, []string{"account:300"}, ""},
		{"mapped account wins over the default", []string{"s-acct", "s-none"}, "300",
			[]xeroLine{{AccountCode: "310", Description: "Stock item s-acct (case)"}, {AccountCode: "300", Description: "Stock item s-none (case)"}},
			[]string{"account:81", "account:300"}, ""},
		{"neither", []string{"s-item", "s-none"}, "", nil, nil, "s-none"},
	}
	for _, tt := range tests {
		xcmd := accountingCommand(testContactID, payload, tt.items...)
		xbody, xerr := xeroBody(XeroConnectionConfig{Status: "SUBMITTED", AccountCode: tt.defaultAccount}, xcmd)
		qcmd := accountingCommand("41", payload, tt.items...)
		qbody, qerr := quickBooksBody(QuickBooksConnectionConfig{ExpenseAccountID: tt.defaultAccount}, qcmd, nil)
		if tt.refused != "" {
			for name, err := range map[string]error{"xero": xerr, "quickbooks": qerr} {
				if e := asError(t, err); e.Kind != PayloadInvalid || !strings.Contains(e.Message, "stock item "+tt.refused) {
					t.Errorf("%s: %s: %v, want PayloadInvalid naming stock item %s", tt.name, name, err, tt.refused)
				}
			}
			continue
		}
		if xerr != nil || qerr != nil {
			t.Fatalf("%s: %v / %v", tt.name, xerr, qerr)
		}
		var x struct {
			PurchaseOrders []struct{ LineItems []xeroLine }
		}
		if err := json.Unmarshal(xbody, &x); err != nil {
			t.Fatal(err)
		}
		if got := x.PurchaseOrders[0].LineItems; !equalLines(got, tt.xero) {
			t.Errorf("%s: xero lines = %+v, want %+v", tt.name, got, tt.xero)
		}
		var q struct{ Line []qboLine }
		if err := json.Unmarshal(qbody, &q); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range q.Line {
			switch {
			case l.DetailType == "ItemBasedExpenseLineDetail" && l.ItemBasedExpenseLineDetail != nil:
				got = append(got, "item:"+l.ItemBasedExpenseLineDetail.ItemRef.Value)
			case l.DetailType == "AccountBasedExpenseLineDetail" && l.AccountBasedExpenseLineDetail != nil:
				got = append(got, "account:"+l.AccountBasedExpenseLineDetail.AccountRef.Value)
			default:
				got = append(got, "?"+l.DetailType)
			}
		}
		if strings.Join(got, ",") != strings.Join(tt.qbo, ",") {
			t.Errorf("%s: quickbooks lines = %v, want %v", tt.name, got, tt.qbo)
		}
	}
	// A mapping of the wrong shape is refused as such.
	cmd := accountingCommand(testContactID, `{"items": {"s-1": "WIDGET"}}`, "s-1")
	if _, err := xeroBody(XeroConnectionConfig{AccountCode: "300"}, cmd); asError(t, err).Kind != PayloadInvalid ||
		!strings.Contains(err.Error(), "payload_json.items") {
		t.Errorf("a mapping that is not an object = %v, want PayloadInvalid naming payload_json.items", err)
	}
}

func equalLines[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestAccountingConfigURLs: apiBaseUrl and tokenUrl are https and public
// unless WEBHOOK_ALLOW_PRIVATE_NETWORKS is on.
func TestAccountingConfigURLs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		config       string
		allowPrivate bool
		bad          string
	}{
		{`{"tenantId": "t"}`, false, ""},
		{`{"tenantId": "t", "apiBaseUrl": "https://api.xero.example/api.xro/2.0/"}`, false, ""},
		{`{"tenantId": "t", "apiBaseUrl": "http://127.0.0.1:8080"}`, false, "apiBaseUrl"},
		{`{"tenantId": "t", "apiBaseUrl": "https://127.0.0.1:8080"}`, false, "apiBaseUrl"},
		{`{"tenantId": "t", "apiBaseUrl": "https://localhost"}`, false, "apiBaseUrl"},
		{`{"tenantId": "t", "tokenUrl": "https://10.0.0.8/token"}`, false, "tokenUrl"},
		{`{"tenantId": "t", "tokenUrl": "https://[::1]/token"}`, false, "tokenUrl"},
		{`{"tenantId": "t", "apiBaseUrl": "http://127.0.0.1:8080", "tokenUrl": "http://localhost/t"}`, true, ""},
		{`{"tenantId": "t", "apiBaseUrl": "ftp://api.xero.com"}`, true, "apiBaseUrl"},
		{`{"tenantId": "t", "apiBaseUrl": "https://api.xero.com?x=1"}`, false, "apiBaseUrl"},
		{`{"tenantId": "t", "apiBaseUrl": 7}`, false, "apiBaseUrl"},
		{`{}`, false, "tenantId"},
		{`{"tenantId": "t", "status": "PAID"}`, false, "status"},
		{`[]`, false, "config_json"},
	} {
		c, err := ParseXeroConfig(json.RawMessage(tt.config), tt.allowPrivate)
		if tt.bad == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.config, err)
			} else if strings.HasSuffix(c.APIBaseURL.Path, "/") || c.Status != "SUBMITTED" {
				t.Errorf("%s: %+v", tt.config, c)
			}
			continue
		}
		if e := asError(t, err); e.Kind != ConfigInvalid || !strings.Contains(e.Message, tt.bad) {
			t.Errorf("%s: %v, want ConfigInvalid naming %s", tt.config, err, tt.bad)
		}
	}
	for _, tt := range []struct{ config, bad string }{
		{`{}`, "realmId"},
		{`{"realmId": "../x"}`, "realmId"},
		{`{"realmId": "123", "minorVersion": 0}`, "minorVersion"},
		{`{"realmId": "123", "minorVersion": "abc"}`, "minorVersion"},
		{`{"realmId": "123", "apiBaseUrl": "http://169.254.169.254"}`, "apiBaseUrl"},
	} {
		_, err := ParseQuickBooksConfig(json.RawMessage(tt.config), false)
		if e := asError(t, err); e.Kind != ConfigInvalid || !strings.Contains(e.Message, tt.bad) {
			t.Errorf("%s: %v, want ConfigInvalid naming %s", tt.config, err, tt.bad)
		}
	}
	c, err := ParseQuickBooksConfig(json.RawMessage(`{"realmId": "123", "minorVersion": "70"}`), false)
	if err != nil || c.MinorVersion != 70 || c.APIBaseURL.String() != DefaultQuickBooksAPIBaseURL || c.TokenURL.String() != DefaultQuickBooksTokenURL {
		t.Errorf("quickbooks config = %+v, %v", c, err)
	}
}

// Xero and QuickBooks Online are limited providers: their defaults are what
// the claim applies to a connection without maxInFlight, and a connection's
// valid overrides win (an invalid one leaves the defaults; its call fails).
func TestAccountingProvidersAreLimited(t *testing.T) {
	r := NewRegistry(NewXero(AccountingConfig{}), NewQuickBooks(AccountingConfig{}), NewSandbox(SandboxConfig{}))
	if got := r.MaxInFlightDefaults(); len(got) != 2 || got[NameXero] != 5 || got[NameQuickBooks] != 10 {
		t.Errorf("MaxInFlightDefaults = %v, want xero 5 and quickbooks 10 only", got)
	}
	x := r[NameXero].(Limited)
	for _, c := range []struct {
		config string
		want   Limits
	}{
		{`{"tenantId": "t"}`, Limits{MaxInFlight: 5, CallsPerMinute: 60}},
		{`{"tenantId": "t", "maxInFlight": 2, "callsPerMinute": 30}`, Limits{MaxInFlight: 2, CallsPerMinute: 30}},
		{`{"tenantId": "t", "maxInFlight": "lots"}`, Limits{MaxInFlight: 5, CallsPerMinute: 60}},
	} {
		if got := x.Limits(Connection{Provider: NameXero, Config: json.RawMessage(c.config)}); got != c.want {
			t.Errorf("Limits(%s) = %+v, want %+v", c.config, got, c.want)
		}
	}
}

// answerCase is an answer a provider documents and how the provider must
// classify it.
type answerCase struct {
	name       string
	reply      reply
	kind       ErrorKind
	auth       bool
	reauth     bool
	pause      bool
	daily      bool
	retryAfter time.Duration
	says       []string
}

// classified fails the test unless e is classified as tc says, says what
// it must, and holds no token.
func (tc answerCase) classified(t *testing.T, e *Error) {
	t.Helper()
	if e.Kind != tc.kind || e.AuthFailed != tc.auth || e.NeedsReauthorization != tc.reauth || e.PauseConnection != tc.pause ||
		e.DailyLimit != tc.daily || e.RetryAfter != tc.retryAfter || e.StatusCode != tc.reply.status {
		t.Errorf("error = %+v", e)
	}
	for _, s := range tc.says {
		if !strings.Contains(e.Error(), s) {
			t.Errorf("error %q does not say %q", e.Error(), s)
		}
	}
	if strings.Contains(e.Error(), testToken) {
		t.Errorf("error %q holds the token", e.Error())
	}
}

// testAccountingConfig lets a provider call the in-process fake API, its
// clock at testNow.
var testAccountingConfig = AccountingConfig{AllowPrivateNetworks: true, Timeout: 2 * time.Second,
	Clock: func() time.Time { return testNow }}
