package provider

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// Fuzz targets for the accounting providers' decoders of outside input:
// their config_json, the command's payload_json mapping and the providers'
// answers. Their seeds (the documented answers under testdata among them)
// run as ordinary tests; `go test -fuzz FuzzX ./internal/provider/` explores.

func addFixtures(f *testing.F, dir string, status ...int) {
	files, _ := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for _, s := range status {
			f.Add(s, b)
		}
	}
}

// checkAnswer holds for any interpretation of an answer: a success is
// completed with a document whose id is its ExternalID; a failure is an
// *Error of a known kind whose text holds no token and is valid UTF-8.
func checkAnswer(t *testing.T, res Result, err error) {
	t.Helper()
	if err != nil {
		e := asError(t, err)
		if e.Kind < Retryable || e.Kind > PayloadInvalid || strings.Contains(e.Error(), testToken) || !utf8.ValidString(e.Message) {
			t.Fatalf("error %+v", e)
		}
		return
	}
	if res.Status != StatusCompleted || res.Document == nil || res.Document.ID != res.ExternalID || res.ExternalID == "" {
		t.Fatalf("result %+v", res)
	}
}

func FuzzXeroAnswer(f *testing.F) {
	addFixtures(f, "xero", 200, 400, 401, 403, 429, 500)
	addSeeds(f, ``, `{`, `null`, `[]`, `{"PurchaseOrders":[]}`, `{"PurchaseOrders":[{"PurchaseOrderID":"`+testToken+`"}]}`,
		`{"Elements":[{"ValidationErrors":[{"Message":"`+testToken+`"}]}]}`, `{"Type":7,"Message":{}}`)
	x := NewXero(AccountingConfig{})
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		if status < 100 || status > 999 {
			return
		}
		h := http.Header{"Retry-After": {"7"}, "X-Rate-Limit-Problem": {testToken}}
		res, err := x.l.interpret(answer{status: status, header: h, body: body}, accountingCred())
		checkAnswer(t, res, err)
		if err == nil && !isGUID(res.ExternalID) {
			t.Fatalf("completed with PurchaseOrderID %q", res.ExternalID)
		}
	})
}

// FuzzXeroContactAnswer: the answers to a contact push (the duplicate-name
// refusals among the fixtures) are a completed create or update with a GUID,
// or an *Error; a duplicate name is always an error too.
func FuzzXeroContactAnswer(f *testing.F) {
	addFixtures(f, "xero", 200, 400, 429)
	addSeeds(f, ``, `{"Contacts":[]}`, `{"Contacts":[{"ContactID":"`+testToken+`"}]}`,
		`{"Contacts":[{"HasValidationErrors":true}]}`, `{"Elements":[{"ValidationErrors":[{"Message":"is ALREADY ASSIGNED TO ANOTHER CONTACT"}]}]}`)
	x := NewXero(AccountingConfig{})
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		if status < 100 || status > 999 {
			return
		}
		w := x.l.interpretContact(answer{status: status, header: http.Header{}, body: body}, accountingCred())
		checkAnswer(t, w.res, w.err)
		if w.taken && w.err == nil || w.err == nil && !isGUID(w.res.ExternalID) {
			t.Fatalf("taken %v, result %+v, error %v", w.taken, w.res, w.err)
		}
	})
}

func FuzzQuickBooksAnswer(f *testing.F) {
	addFixtures(f, "quickbooks", 200, 400, 401, 403, 429, 500)
	addSeeds(f, ``, `{`, `null`, `{"PurchaseOrder":null}`, `{"PurchaseOrder":{"Id":""}}`,
		`{"Fault":{}}`, `{"fault":{"error":[{"code":5010}]}}`, `{"Fault":{"type":"`+testToken+`","Error":[{"Detail":"`+testToken+`"}]}}`)
	q := NewQuickBooks(AccountingConfig{})
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		if status < 100 || status > 999 {
			return
		}
		a := answer{status: status, header: http.Header{}, body: body}
		ans := decodeQBOAnswer(body)
		if err := q.l.failure(a, ans, accountingCred()); err != nil {
			checkAnswer(t, Result{}, err)
			return
		}
		if status < 200 || status > 299 || ans.Fault != nil {
			t.Fatalf("status %d with fault %v taken as a success", status, ans.Fault != nil)
		}
	})
}

func FuzzAccountingConfig(f *testing.F) {
	for _, seed := range []string{``, `null`, `{}`, `[]`, `{"tenantId":"t"}`, `{"realmId":"9130"}`,
		`{"tenantId":"t","realmId":"1","status":"DRAFT","minorVersion":"70","maxInFlight":3,"callsPerMinute":1e2}`,
		`{"tenantId":"t","realmId":"1","apiBaseUrl":"http://127.0.0.1:1","tokenUrl":"https://[::1]/"}`,
		`{"tenantId":"t","realmId":"1","apiBaseUrl":"https://x.example/a/?q"}`} {
		f.Add([]byte(seed), false)
		f.Add([]byte(seed), true)
	}
	f.Fuzz(func(t *testing.T, raw []byte, allowPrivate bool) {
		xc, xerr := ParseXeroConfig(raw, allowPrivate)
		qc, qerr := ParseQuickBooksConfig(raw, allowPrivate)
		for _, err := range []error{xerr, qerr} {
			if err != nil {
				if e := asError(t, err); e.Kind != ConfigInvalid || !strings.Contains(e.Message, "config_json") {
					t.Fatalf("error %+v", e)
				}
			}
		}
		if xerr == nil && (xc.TenantID == "" || xc.Limits.MaxInFlight < 1 || xc.Limits.CallsPerMinute < 1 ||
			(!allowPrivate && (xc.APIBaseURL.Scheme != "https" || xc.TokenURL.Scheme != "https"))) {
			t.Fatalf("xero config %+v accepted", xc)
		}
		if qerr == nil && (!realmID.MatchString(qc.RealmID) || qc.MinorVersion < 1 || qc.Limits.MaxInFlight < 1 ||
			(!allowPrivate && (qc.APIBaseURL.Scheme != "https" || qc.TokenURL.Scheme != "https"))) {
			t.Fatalf("quickbooks config %+v accepted", qc)
		}
	})
}

func FuzzItemMappings(f *testing.F) {
	for _, seed := range []string{``, `null`, `{}`, `{"items":null}`, `{"items":{"s-1":{"itemCode":"W"}}}`,
		`{"items":{"s-1":"W"}}`, `{"items":[1]}`, `{"items":{"s-1":{"accountId":7}}}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		cmd := accountingCommand(testContactID, string(raw), "s-1")
		body, err := xeroBody(XeroConnectionConfig{Status: "SUBMITTED", AccountCode: "300"}, cmd)
		if err != nil {
			if e := asError(t, err); e.Kind != PayloadInvalid {
				t.Fatalf("error %+v", e)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("body %q", body)
		}
	})
}

// addSeeds adds each body as a 200 and a 400 answer.
func addSeeds(f *testing.F, bodies ...string) {
	for _, b := range bodies {
		f.Add(200, []byte(b))
		f.Add(400, []byte(b))
	}
}
