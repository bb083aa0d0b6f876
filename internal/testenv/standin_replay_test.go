package testenv

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a stand-in's Now that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2024, 3, 12, 9, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// freshClient opens a connection for each request, so that Go's transport
// does not send a POST again on its own when the answer is lost.
func freshClient(t *testing.T) *http.Client {
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// call sends a request and returns the status, headers and body of the
// answer, or the error of a request that got none.
func call(c *http.Client, req *http.Request) (int, http.Header, string, error) {
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body), err
}

const (
	xeroTestTenant = "tenant-1"
	xeroTestToken  = "xero-token"
)

// startXero starts a stand-in on a fake clock, set up by setup (when not
// nil) before it holds one contact, whose id it returns.
func startXero(t *testing.T, setup func(*XeroStandIn)) (*XeroStandIn, *fakeClock, string) {
	t.Helper()
	x, err := StartXeroStandIn(xeroTestTenant, xeroTestToken)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Close)
	clock := newFakeClock()
	x.Now = clock.Now
	if setup != nil {
		setup(x)
	}
	return x, clock, x.AddContact("Acme Supplies", "") // after the setup, under the stand-in's lock
}

// xeroRequest is a request to the stand-in's API with its token, tenant
// and, when not empty, Idempotency-Key.
func xeroRequest(t *testing.T, x *XeroStandIn, method, path, key, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, x.URL+xeroAPI+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+xeroTestToken)
	req.Header.Set("xero-tenant-id", xeroTestTenant)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return req
}

// xeroOrderBody is the body of one purchase order for contact.
func xeroOrderBody(reference, contact, date string) string {
	return `{"PurchaseOrders":[{"Reference":"` + reference + `","Date":"` + date + `","Status":"SUBMITTED","Contact":{"ContactID":"` + contact +
		`"},"LineItems":[{"Description":"Stock item","Quantity":1,"UnitAmount":2.5,"AccountCode":"300"}]}]}`
}

// xeroCreate creates a purchase order and returns the answer's body.
func xeroCreate(t *testing.T, x *XeroStandIn, key, body string) string {
	t.Helper()
	status, _, got, err := call(http.DefaultClient, xeroRequest(t, x, http.MethodPost, "/PurchaseOrders?summarizeErrors=false", key, body))
	if err != nil || status != http.StatusOK {
		t.Fatalf("create: %d %s, %v", status, got, err)
	}
	return got
}

func TestXeroStandInReplaysAKeyWithinTheWindow(t *testing.T) {
	t.Parallel()
	x, clock, contact := startXero(t, func(x *XeroStandIn) { x.ReplayWindow = time.Hour })
	body := xeroOrderBody("PO-1001", contact, "2024-03-12")

	first := xeroCreate(t, x, "key-1", body)
	clock.Add(time.Hour - time.Second)
	if again := xeroCreate(t, x, "key-1", body); again != first {
		t.Errorf("the same key within the window answered\n%s\nwant the first answer\n%s", again, first)
	}
	if n, c := len(x.Orders()), x.Counts(); n != 1 || c["replay"] != 1 || c["200 OK (create)"] != 1 {
		t.Errorf("%d orders, counts %v; want 1 order, 1 create and 1 replay", n, c)
	}

	clock.Add(time.Second) // the key's first use is ReplayWindow ago: forgotten
	if late := xeroCreate(t, x, "key-1", body); late == first {
		t.Error("the same key after the window got the first answer again")
	}
	if n, c := len(x.Orders()), x.Counts(); n != 2 || c["replay"] != 1 || c["200 OK (create)"] != 2 {
		t.Errorf("%d orders, counts %v; want 2 orders, 2 creates and 1 replay", n, c)
	}

	// Without a key nothing is replayed.
	xeroCreate(t, x, "", body)
	xeroCreate(t, x, "", body)
	if n := len(x.Orders()); n != 4 {
		t.Errorf("%d orders after two creates without a key, want 4", n)
	}

	// A contact's create is replayed too.
	contactBody := `{"Contacts":[{"Name":"Beta Foods"}]}`
	for range 2 {
		status, _, got, err := call(http.DefaultClient, xeroRequest(t, x, http.MethodPost, "/Contacts", "contact-key", contactBody))
		if err != nil || status != http.StatusOK {
			t.Fatalf("contact create: %d %s, %v", status, got, err)
		}
	}
	if n, c := len(x.Contacts()), x.Counts(); n != 2 || c["replay"] != 2 {
		t.Errorf("%d contacts, counts %v; want 2 contacts and 2 replays", n, c)
	}
}

func TestXeroStandInReplaysForEverWithoutAWindow(t *testing.T) {
	t.Parallel()
	x, clock, contact := startXero(t, nil)
	body := xeroOrderBody("PO-1001", contact, "")
	first := xeroCreate(t, x, "key-1", body)
	clock.Add(1000 * time.Hour)
	if again := xeroCreate(t, x, "key-1", body); again != first || len(x.Orders()) != 1 {
		t.Errorf("the same key 1000 hours on answered %s with %d orders, want the first answer and 1 order", again, len(x.Orders()))
	}

	// A key is its path's: an update with the create's key is served.
	id := x.Orders()[0].PurchaseOrderID
	status, _, got, err := call(http.DefaultClient, xeroRequest(t, x, http.MethodPost, "/PurchaseOrders/"+id, "key-1",
		xeroOrderBody("PO-1001-B", contact, "")))
	if o := x.Orders(); err != nil || status != http.StatusOK || len(o) != 1 || o[0].Reference != "PO-1001-B" || x.Counts()["200 OK (update)"] != 1 {
		t.Errorf("an update with the create's key: %d %s, %v; orders %+v, want it served", status, got, err, o)
	}
}

func TestXeroStandInLosesAnswers(t *testing.T) {
	t.Parallel()
	for name, client := range map[string]*http.Client{"a new connection": freshClient(t), "a reused connection": http.DefaultClient} {
		t.Run(name, func(t *testing.T) {
			x, _, contact := startXero(t, nil)
			body := xeroOrderBody("PO-1001", contact, "2024-03-12")
			// A first request leaves the connection open for the next,
			// with the reused client: Go's transport would send the lost
			// POST again on it.
			xeroList(t, x, nil)
			x.LoseAnswers(1)

			status, _, got, err := call(client, xeroRequest(t, x, http.MethodPost, "/PurchaseOrders?summarizeErrors=false", "key-1", body))
			if err == nil {
				t.Fatalf("a lost answer reached the client: %d %s", status, got)
			}
			orders := x.Orders()
			if c := x.Counts(); len(orders) != 1 || orders[0].Reference != "PO-1001" || c["lost answer"] != 1 || c["replay"] != 0 {
				t.Fatalf("orders %+v, counts %v; want the one order made, 1 lost answer, no replay", orders, c)
			}

			// Sent again with its key: the answer the client lost.
			status, _, got, err = call(client, xeroRequest(t, x, http.MethodPost, "/PurchaseOrders?summarizeErrors=false", "key-1", body))
			if err != nil || status != http.StatusOK || !strings.Contains(got, orders[0].PurchaseOrderID) {
				t.Errorf("the create again: %d %s, %v; want the answer naming %s", status, got, err, orders[0].PurchaseOrderID)
			}
			// The next create is answered.
			status, _, got, err = call(client, xeroRequest(t, x, http.MethodPost, "/PurchaseOrders?summarizeErrors=false", "key-2", body))
			if err != nil || status != http.StatusOK {
				t.Errorf("the next create: %d %s, %v", status, got, err)
			}
			if n, c := len(x.Orders()), x.Counts(); n != 2 || c["lost answer"] != 1 || c["replay"] != 1 || c["200 OK (create)"] != 2 {
				t.Errorf("%d orders, counts %v; want 2 orders, 2 creates, 1 lost answer, 1 replay", n, c)
			}
		})
	}
}

// xeroOrderList is what a test reads of the answer to GET /PurchaseOrders.
type xeroOrderList struct {
	Status, ProviderName string
	Pagination           struct{ Page, PageSize, PageCount, ItemCount int }
	PurchaseOrders       []struct {
		PurchaseOrderID, PurchaseOrderNumber, Reference, DateString, Date, Status string
		Contact                                                                   struct{ ContactID, Name string }
	}
}

func xeroList(t *testing.T, x *XeroStandIn, query url.Values) xeroOrderList {
	t.Helper()
	status, _, got, err := call(http.DefaultClient, xeroRequest(t, x, http.MethodGet, "/PurchaseOrders?"+query.Encode(), "", ""))
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET /PurchaseOrders?%s: %d %s, %v", query.Encode(), status, got, err)
	}
	var list xeroOrderList
	if err := json.Unmarshal([]byte(got), &list); err != nil {
		t.Fatalf("GET /PurchaseOrders: %v in %s", err, got)
	}
	return list
}

func TestXeroStandInSearchesOrdersByDateAndPages(t *testing.T) {
	t.Parallel()
	x, _, contact := startXero(t, nil)
	added := x.AddOrder("PO-1000", contact, "2024-03-10")
	xeroCreate(t, x, "key-1", xeroOrderBody("PO-1001", contact, "2024-03-11"))
	xeroCreate(t, x, "key-2", xeroOrderBody("PO-1002", contact, "")) // the clock's day, 2024-03-12

	one := xeroList(t, x, url.Values{"DateFrom": {"2024-03-11"}, "DateTo": {"2024-03-11"}})
	if len(one.PurchaseOrders) != 1 || one.PurchaseOrders[0].Reference != "PO-1001" || one.Pagination.ItemCount != 1 {
		t.Errorf("the orders of 2024-03-11: %+v, want PO-1001 alone", one)
	}
	from := xeroList(t, x, url.Values{"DateFrom": {"2024-03-11"}})
	if len(from.PurchaseOrders) != 2 || from.PurchaseOrders[0].Reference != "PO-1001" || from.PurchaseOrders[1].Reference != "PO-1002" {
		t.Errorf("the orders from 2024-03-11: %+v, want PO-1001 and PO-1002", from)
	}

	all := xeroList(t, x, nil)
	if all.Status != "OK" || all.ProviderName == "" || len(all.PurchaseOrders) != 3 || all.PurchaseOrders[0].PurchaseOrderID != added ||
		all.Pagination.Page != 1 || all.Pagination.PageSize != 100 || all.Pagination.PageCount != 1 || all.Pagination.ItemCount != 3 {
		t.Errorf("all orders: %+v, want the 3 in creation order on one page of 100", all)
	}
	first := xeroList(t, x, url.Values{"pageSize": {"2"}})
	second := xeroList(t, x, url.Values{"page": {"2"}, "pageSize": {"2"}})
	if p := second.Pagination; p.Page != 2 || p.PageSize != 2 || p.PageCount != 2 || p.ItemCount != 3 {
		t.Errorf("page 2's pagination %+v, want page 2 of 2 pages of 2, 3 items", p)
	}
	if len(first.PurchaseOrders) != 2 || len(second.PurchaseOrders) != 1 {
		t.Fatalf("pages of 2: %d and %d orders, want 2 and 1", len(first.PurchaseOrders), len(second.PurchaseOrders))
	}
	last := second.PurchaseOrders[0]
	if last.Reference != "PO-1002" || last.PurchaseOrderNumber != "PO-0003" || last.Status != "SUBMITTED" ||
		last.DateString != "2024-03-12T00:00:00" || last.Date != "/Date(1710201600000+0000)/" ||
		last.Contact.ContactID != contact || last.Contact.Name != "Acme Supplies" {
		t.Errorf("the last order %+v", last)
	}
	if beyond := xeroList(t, x, url.Values{"page": {"3"}, "pageSize": {"2"}}); len(beyond.PurchaseOrders) != 0 {
		t.Errorf("page 3 of 2: %+v, want no orders", beyond)
	}
	if o := x.Orders(); len(o) != 3 || o[0].Date != "2024-03-10" || o[2].Date != "2024-03-12" || o[0].Status != "DRAFT" {
		t.Errorf("Orders() = %+v", o)
	}

	for _, bad := range []string{"DateFrom=2024-3-1", "DateTo=yesterday", "page=0", "pageSize=x"} {
		status, _, got, err := call(http.DefaultClient, xeroRequest(t, x, http.MethodGet, "/PurchaseOrders?"+bad, "", ""))
		if err != nil || status != http.StatusBadRequest || !strings.Contains(got, "ValidationException") {
			t.Errorf("%s: %d %s, %v; want Xero's 400 validation answer", bad, status, got, err)
		}
	}
	if c := x.Counts(); c["200 OK (order search)"] != 6 || c["400 Bad Request"] != 4 {
		t.Errorf("counts %v, want 6 order searches and 4 bad requests", c)
	}
}

func TestXeroStandInBeforeInjectsAnAnswer(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	x, _, contact := startXero(t, func(x *XeroStandIn) {
		x.Before = func(req *http.Request) (int, http.Header, string) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, req.Method+" "+req.URL.Path)
			if req.Method == http.MethodPost {
				return http.StatusTooManyRequests, http.Header{"Retry-After": {"7"}, "X-Rate-Limit-Problem": {"minute"}}, `{"Title":"Too Many Requests"}`
			}
			return 0, nil, ""
		}
	})

	status, header, got, err := call(http.DefaultClient, xeroRequest(t, x, http.MethodPost, "/PurchaseOrders", "key-1", xeroOrderBody("PO-1001", contact, "")))
	if err != nil || status != http.StatusTooManyRequests || header.Get("Retry-After") != "7" ||
		header.Get("X-Rate-Limit-Problem") != "minute" || got != `{"Title":"Too Many Requests"}` {
		t.Errorf("injected answer: %d %v %s, %v", status, header, got, err)
	}
	list := xeroList(t, x, nil) // Before answers 0: served
	if len(list.PurchaseOrders) != 0 || len(x.Orders()) != 0 {
		t.Errorf("an injected answer made an order: %+v", list)
	}
	// A request refused for its token never reaches Before.
	req := xeroRequest(t, x, http.MethodPost, "/PurchaseOrders", "key-1", "{}")
	req.Header.Set("Authorization", "Bearer wrong")
	if status, _, _, _ := call(http.DefaultClient, req); status != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d, want 401", status)
	}
	mu.Lock()
	defer mu.Unlock()
	if c := x.Counts(); c["injected 429"] != 1 || c["200 OK (order search)"] != 1 || c["replay"] != 0 || len(seen) != 2 {
		t.Errorf("counts %v, Before saw %v; want 1 injected 429, 1 search, no replay, 2 requests seen", c, seen)
	}
}

const qboTestToken = "qbo-token"

// startQuickBooks starts a stand-in on a fake clock, set up by setup
// (when not nil) before it holds one vendor, whose Id it returns.
func startQuickBooks(t *testing.T, setup func(*QuickBooksStandIn)) (*QuickBooksStandIn, *fakeClock, string) {
	t.Helper()
	q, err := StartQuickBooksStandIn("9130", qboTestToken)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	clock := newFakeClock()
	q.Now = clock.Now
	if setup != nil {
		setup(q)
	}
	return q, clock, q.AddVendor("Acme Supplies") // after the setup, under the stand-in's lock
}

// qboRequest is a request to the company's path with the token and a
// minorversion (and requestid, when not empty).
func qboRequest(t *testing.T, q *QuickBooksStandIn, method, path string, query url.Values, body string) *http.Request {
	t.Helper()
	if query == nil {
		query = url.Values{}
	}
	query.Set("minorversion", "75")
	req, err := http.NewRequest(method, q.URL+"/v3/company/"+q.Realm+"/"+path+"?"+query.Encode(), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+qboTestToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	return req
}

// qboOrderBody is a minimal purchase order valid in Intuit's data model.
func qboOrderBody(docNumber, vendor, txnDate string) string {
	body := `{"DocNumber":` + jsonString(docNumber) + `,"VendorRef":{"value":"` + vendor + `"},` +
		`"Line":[{"DetailType":"AccountBasedExpenseLineDetail","Amount":1,"AccountBasedExpenseLineDetail":{"AccountRef":{"value":"80"}}}]`
	if txnDate != "" {
		body += `,"TxnDate":"` + txnDate + `"`
	}
	return body + "}"
}

// jsonString is s as a JSON string.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// qboCreate creates a purchase order with requestid rid and returns the
// answer's body and the order's Id.
func qboCreate(t *testing.T, q *QuickBooksStandIn, rid, body string) (string, string) {
	t.Helper()
	status, _, got, err := call(http.DefaultClient, qboRequest(t, q, http.MethodPost, "purchaseorder", url.Values{"requestid": {rid}}, body))
	var ans struct{ PurchaseOrder struct{ Id string } }
	if err != nil || status != http.StatusOK || json.Unmarshal([]byte(got), &ans) != nil || ans.PurchaseOrder.Id == "" {
		t.Fatalf("create: %d %s, %v (refusals %v)", status, got, err, q.Refusals())
	}
	return got, ans.PurchaseOrder.Id
}

func TestQuickBooksStandInReplaysARequestIDWithinTheWindow(t *testing.T) {
	t.Parallel()
	q, clock, vendor := startQuickBooks(t, func(q *QuickBooksStandIn) { q.ReplayWindow = 24 * time.Hour })
	body := qboOrderBody("PO-1001", vendor, "")

	first, id := qboCreate(t, q, "rid-1", body)
	clock.Add(24*time.Hour - time.Second)
	if again, _ := qboCreate(t, q, "rid-1", body); again != first {
		t.Errorf("the same requestid within the window answered\n%s\nwant the first answer\n%s", again, first)
	}
	if n := len(q.PurchaseOrders()); n != 1 || q.Replays() != 1 {
		t.Errorf("%d purchase orders, %d replays; want 1 and 1", n, q.Replays())
	}
	clock.Add(time.Second)
	if _, late := qboCreate(t, q, "rid-1", body); late == id {
		t.Error("the same requestid after the window got the first answer again")
	}
	if n := len(q.PurchaseOrders()); n != 2 || q.Replays() != 1 {
		t.Errorf("%d purchase orders, %d replays; want 2 and 1", n, q.Replays())
	}
}

func TestQuickBooksStandInLosesAnswers(t *testing.T) {
	t.Parallel()
	q, _, vendor := startQuickBooks(t, nil)
	body := qboOrderBody("PO-1001", vendor, "")
	_, id := qboCreate(t, q, "rid-0", body)
	q.LoseAnswers(1)

	// An update is not a create: answered.
	update := `{"Id":"` + id + `","SyncToken":"0","sparse":true,"Memo":"x"}`
	status, _, got, err := call(http.DefaultClient, qboRequest(t, q, http.MethodPost, "purchaseorder", url.Values{"requestid": {"rid-u"}}, update))
	if err != nil || status != http.StatusOK {
		t.Fatalf("update: %d %s, %v (refusals %v)", status, got, err, q.Refusals())
	}

	status, _, got, err = call(http.DefaultClient, qboRequest(t, q, http.MethodPost, "purchaseorder", url.Values{"requestid": {"rid-1"}}, body))
	if err == nil {
		t.Fatalf("a lost answer reached the client: %d %s", status, got)
	}
	if n := len(q.PurchaseOrders()); n != 2 {
		t.Fatalf("%d purchase orders, want the lost create's made: 2", n)
	}
	// Sent again with its requestid: the answer the client lost.
	again, made := qboCreate(t, q, "rid-1", body)
	if n := len(q.PurchaseOrders()); n != 2 || q.Replays() != 1 || made == id {
		t.Errorf("the create again: %s; %d purchase orders, %d replays; want the new order, 2 and 1", again, n, q.Replays())
	}
	if _, next := qboCreate(t, q, "rid-2", body); next == made || len(q.PurchaseOrders()) != 3 {
		t.Errorf("the next create did not make a third order")
	}
}

// qboQuery runs a query and returns the answer's QueryResponse.
func qboQuery(t *testing.T, q *QuickBooksStandIn, query string) map[string]json.RawMessage {
	t.Helper()
	status, _, got, err := call(http.DefaultClient, qboRequest(t, q, http.MethodGet, "query", url.Values{"query": {query}}, ""))
	var ans struct{ QueryResponse map[string]json.RawMessage }
	if err != nil || status != http.StatusOK || json.Unmarshal([]byte(got), &ans) != nil || ans.QueryResponse == nil {
		t.Fatalf("%s: %d %s, %v", query, status, got, err)
	}
	return ans.QueryResponse
}

type qboFoundOrder struct {
	Id, SyncToken, DocNumber, TxnDate string
	VendorRef                         struct{ Value string }
}

func qboFoundOrders(t *testing.T, resp map[string]json.RawMessage) []qboFoundOrder {
	t.Helper()
	var found []qboFoundOrder
	if raw, ok := resp["PurchaseOrder"]; ok {
		if err := json.Unmarshal(raw, &found); err != nil {
			t.Fatal(err)
		}
		var max int
		json.Unmarshal(resp["maxResults"], &max)
		if string(resp["startPosition"]) != "1" || max != len(found) {
			t.Errorf("startPosition %s, maxResults %s for %d found", resp["startPosition"], resp["maxResults"], len(found))
		}
	}
	return found
}

func TestQuickBooksStandInQueriesPurchaseOrdersByDocNumber(t *testing.T) {
	t.Parallel()
	q, _, vendor := startQuickBooks(t, nil)
	added := q.AddPurchaseOrder("PO-1001", vendor)
	_, quoted := qboCreate(t, q, "rid-1", qboOrderBody("O'Brien-1", vendor, "2024-01-05"))

	found := qboFoundOrders(t, qboQuery(t, q, "select * from PurchaseOrder where DocNumber = 'PO-1001'"))
	if len(found) != 1 || found[0].Id != added || found[0].SyncToken != "0" || found[0].DocNumber != "PO-1001" ||
		found[0].VendorRef.Value != vendor || found[0].TxnDate != "2024-03-12" {
		t.Errorf("PO-1001: %+v, want the added order of the clock's day", found)
	}
	found = qboFoundOrders(t, qboQuery(t, q, `select * from PurchaseOrder where DocNumber = 'O\'Brien-1'`))
	if len(found) != 1 || found[0].Id != quoted || found[0].TxnDate != "2024-01-05" {
		t.Errorf("O'Brien-1: %+v, want the created order of its TxnDate", found)
	}
	if resp := qboQuery(t, q, "select * from PurchaseOrder where DocNumber = 'po-1001'"); len(resp) != 0 {
		t.Errorf("another case: %v, want an empty QueryResponse", resp)
	}

	// Two documents of one number: both, in the order they were made.
	second := q.AddPurchaseOrder("PO-1001", vendor)
	found = qboFoundOrders(t, qboQuery(t, q, "select * from PurchaseOrder where DocNumber = 'PO-1001'"))
	if len(found) != 2 || found[0].Id != added || found[1].Id != second {
		t.Errorf("two of PO-1001: %+v", found)
	}

	// The vendor query still works.
	var vendors []struct{ Id, DisplayName string }
	json.Unmarshal(qboQuery(t, q, "select * from Vendor where DisplayName = 'acme supplies'")["Vendor"], &vendors)
	if len(vendors) != 1 || vendors[0].Id != vendor {
		t.Errorf("vendors %+v, want %s", vendors, vendor)
	}
	for _, bad := range []string{"select * from PurchaseOrder where TotalAmt = '1'", "select * from PurchaseOrder where DocNumber = '"} {
		status, _, got, err := call(http.DefaultClient, qboRequest(t, q, http.MethodGet, "query", url.Values{"query": {bad}}, ""))
		if err != nil || status != http.StatusBadRequest || !strings.Contains(got, "DocNumber") || !strings.Contains(got, "DisplayName") {
			t.Errorf("%s: %d %s, %v; want the parser's error naming both queries", bad, status, got, err)
		}
	}
}

func TestQuickBooksStandInBeforeInjectsAnAnswer(t *testing.T) {
	t.Parallel()
	var throttled atomic.Bool
	throttled.Store(true)
	q, _, vendor := startQuickBooks(t, func(q *QuickBooksStandIn) {
		q.Before = func(req *http.Request) (int, http.Header, string) {
			if req.Method == http.MethodPost && throttled.Load() {
				return http.StatusTooManyRequests, http.Header{"Retry-After": {"3"}},
					`{"Fault":{"Error":[{"Message":"message=ThrottleExceeded","Detail":"Too many requests","code":"3001"}],"type":"ThrottleExceeded"}}`
			}
			return 0, nil, ""
		}
	})
	status, header, got, err := call(http.DefaultClient, qboRequest(t, q, http.MethodPost, "purchaseorder",
		url.Values{"requestid": {"rid-1"}}, qboOrderBody("PO-1001", vendor, "")))
	if err != nil || status != http.StatusTooManyRequests || header.Get("Retry-After") != "3" || !strings.Contains(got, "ThrottleExceeded") {
		t.Errorf("injected answer: %d %v %s, %v", status, header, got, err)
	}
	if n := len(q.PurchaseOrders()); n != 0 || len(q.Refusals()) != 0 || q.Requests() != 1 {
		t.Errorf("%d purchase orders, refusals %v, %d requests; want none, none, 1", n, q.Refusals(), q.Requests())
	}
	// A GET is served; the requestid was not answered, so nothing replays.
	if resp := qboQuery(t, q, "select * from PurchaseOrder where DocNumber = 'PO-1001'"); len(resp) != 0 {
		t.Errorf("an injected answer made an order: %v", resp)
	}
	throttled.Store(false)
	qboCreate(t, q, "rid-1", qboOrderBody("PO-1001", vendor, ""))
	if q.Replays() != 0 || len(q.PurchaseOrders()) != 1 {
		t.Errorf("%d replays, %d orders after the injected answer; want 0 and 1", q.Replays(), len(q.PurchaseOrders()))
	}
}
