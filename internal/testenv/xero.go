package testenv

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// XeroStandIn is a LOCAL STAND-IN of Xero's accounting API, for the demo
// and the end-to-end tests: it answers POST /api.xro/2.0/Contacts (create,
// or update with a ContactID; a second active contact of one name is
// refused with Xero's validation error), GET /api.xro/2.0/Contacts with a
// where filter on ContactNumber or Name, POST /api.xro/2.0/PurchaseOrders
// (create) and /PurchaseOrders/{id} (update), whose Contact must be one of
// its contacts, and GET /api.xro/2.0/PurchaseOrders (DateFrom, DateTo,
// page, pageSize), the way Xero's reference documents them. A POST with
// an Idempotency-Key it answered before on the same path gets that answer
// again and changes nothing (counted "replay"). It checks the bearer token
// and the tenant header, and keeps what it got. It is not Xero: the
// provider's own tests replay Xero's documented answers
// (internal/provider/testdata/xero).
type XeroStandIn struct {
	URL    string // base of the API: URL + "/api.xro/2.0"
	Tenant string
	Token  string
	// Authorize, when set, replaces the check against Token: it says
	// whether the bearer token is live (an authorization server's tokens
	// that expire and rotate). Set it before the first request.
	Authorize func(token string) bool
	// ReplayWindow is how long an Idempotency-Key is remembered after its
	// first use: a key used ReplayWindow or more before Now is forgotten,
	// and its request served as new. 0 keeps keys for ever. Set it before
	// the first request.
	ReplayWindow time.Duration
	// Now is the stand-in's clock (nil: time.Now): it times the
	// Idempotency-Keys and dates an order made without a Date. Set it
	// before the first request.
	Now func() time.Time
	// Before, when set, is called with each request whose token and
	// tenant pass. A status other than 0 is answered, with header and
	// body, instead of serving the request (counted "injected <status>").
	// It is read under the stand-in's lock and called outside it: set it
	// before the first request, or take care of its use yourself. It
	// should not read the request's body, which the stand-in reads after.
	Before func(req *http.Request) (status int, header http.Header, body string)

	srv *http.Server
	mu  sync.Mutex
	// Counts is how many requests got each answer ("200 OK (create)", …).
	counts   map[string]int
	contacts map[string]XeroContact // by ContactID
	orders   map[string]XeroOrder   // by PurchaseOrderID
	made     []string               // the PurchaseOrderIDs in creation order
	keys     map[string]xeroKept    // by path and Idempotency-Key
	lose     int                    // how many creates' answers to lose
}

// xeroKept is the first answer to an Idempotency-Key and when it was used.
type xeroKept struct {
	answer xeroAnswer
	at     time.Time
}

// xeroAnswer is an answer before it is sent: status, extra headers, body.
type xeroAnswer struct {
	status int
	header http.Header
	body   string
}

// XeroContact is a contact the stand-in holds.
type XeroContact struct {
	ContactID, Name, ContactNumber string
	// Fields is the last body element that created or updated it.
	Fields map[string]any
}

// XeroOrder is a purchase order the stand-in holds.
type XeroOrder struct {
	PurchaseOrderID, PurchaseOrderNumber, Reference, ContactID string
	// Date is its day, YYYY-MM-DD: the body's Date, or the day of Now
	// (UTC) it was made when the body had none.
	Date   string
	Status string // DRAFT when the body had none
	Lines  int
}

// StartXeroStandIn serves a XeroStandIn on a free loopback port; Close
// stops it.
func StartXeroStandIn(tenant, token string) (*XeroStandIn, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	x := &XeroStandIn{URL: "http://" + l.Addr().String(), Tenant: tenant, Token: token, counts: map[string]int{},
		contacts: map[string]XeroContact{}, orders: map[string]XeroOrder{}, keys: map[string]xeroKept{}}
	x.srv = &http.Server{Handler: http.HandlerFunc(x.serve), ReadHeaderTimeout: 5 * time.Second, ConnContext: countRequests}
	go x.srv.Serve(l)
	return x, nil
}

// Close stops the server.
func (x *XeroStandIn) Close() { x.srv.Close() }

// Counts returns how many requests got each answer.
func (x *XeroStandIn) Counts() map[string]int {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make(map[string]int, len(x.counts))
	for k, v := range x.counts {
		out[k] = v
	}
	return out
}

// Contacts returns the contacts it holds.
func (x *XeroStandIn) Contacts() []XeroContact {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]XeroContact, 0, len(x.contacts))
	for _, c := range x.contacts {
		out = append(out, c)
	}
	return out
}

// Orders returns the purchase orders it holds, in creation order.
func (x *XeroStandIn) Orders() []XeroOrder {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]XeroOrder, 0, len(x.made))
	for _, id := range x.made {
		out = append(out, x.orders[id])
	}
	return out
}

// LoseAnswers makes it lose the answers to the next n POSTs to
// /PurchaseOrders (creates): each is served in full (the order made, its
// Idempotency-Key remembered) and counted, also as "lost answer", but its
// connection is closed without an answer. Go's http.Transport sends a POST
// with an Idempotency-Key again on its own when a reused connection closes
// unanswered: such a POST on a reused connection is closed unserved and
// uncounted, and the one sent again on a new connection is the one lost.
func (x *XeroStandIn) LoseAnswers(n int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.lose = n
}

// AddOrder puts a purchase order there as if someone had made it in Xero,
// for contactID, dated date (YYYY-MM-DD; empty: the day of Now), and
// returns its PurchaseOrderID.
func (x *XeroStandIn) AddOrder(reference, contactID, date string) string {
	x.mu.Lock()
	defer x.mu.Unlock()
	if date == "" {
		date = x.now().UTC().Format(time.DateOnly)
	}
	id := newStandInID()
	x.addOrder(XeroOrder{PurchaseOrderID: id, Reference: reference, ContactID: contactID, Date: date, Status: "DRAFT"})
	return id
}

// addOrder keeps a new order, numbered after the others.
func (x *XeroStandIn) addOrder(o XeroOrder) {
	x.made = append(x.made, o.PurchaseOrderID)
	o.PurchaseOrderNumber = fmt.Sprintf("PO-%04d", len(x.made))
	x.orders[o.PurchaseOrderID] = o
}

func (x *XeroStandIn) now() time.Time {
	if x.Now != nil {
		return x.Now()
	}
	return time.Now()
}

const xeroAPI = "/api.xro/2.0"

func (x *XeroStandIn) serve(w http.ResponseWriter, req *http.Request) {
	a, lost := x.handle(req, reusedConn(req))
	if lost {
		hangUp(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	for k, v := range a.header {
		w.Header()[k] = v
	}
	w.WriteHeader(a.status)
	io.WriteString(w, a.body)
}

// handle works out the answer to req, which came on a connection reused
// or not, and whether to lose it.
func (x *XeroStandIn) handle(req *http.Request, reused bool) (a *xeroAnswer, lost bool) {
	a = &xeroAnswer{}
	x.mu.Lock()
	token, _ := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	live := token == x.Token
	if x.Authorize != nil {
		live = x.Authorize(token)
	}
	if !live || req.Header.Get("xero-tenant-id") != x.Tenant {
		x.answer(a, http.StatusUnauthorized, "401 Unauthorized", `{"Title":"Unauthorized","Status":401,"Detail":"AuthenticationUnsuccessful"}`)
		x.mu.Unlock()
		return a, false
	}
	before := x.Before
	x.mu.Unlock()
	if before != nil {
		if status, header, body := before(req); status != 0 {
			x.mu.Lock()
			defer x.mu.Unlock()
			x.answer(a, status, "injected "+strconv.Itoa(status), body)
			a.header = header
			return a, false
		}
	}

	x.mu.Lock()
	defer x.mu.Unlock()
	path := strings.TrimPrefix(req.URL.Path, xeroAPI)
	orders := path == "/PurchaseOrders" || strings.HasPrefix(path, "/PurchaseOrders/")
	post := req.Method == http.MethodPost && (orders || path == "/Contacts")
	if post && path == "/PurchaseOrders" && x.lose > 0 {
		if reused && resentByGo(req) {
			return nil, true
		}
		x.lose--
		x.counts["lost answer"]++
		lost = true
	}
	key := req.Header.Get("Idempotency-Key")
	if post && key != "" {
		// Keys are kept per path: an update that carries the key of the
		// create before it is served, not replayed.
		key = req.URL.Path + " " + key
		now := x.now()
		if k, ok := x.keys[key]; ok && (x.ReplayWindow <= 0 || now.Sub(k.at) < x.ReplayWindow) {
			x.counts["replay"]++
			return &k.answer, lost
		}
		defer func() { x.keys[key] = xeroKept{answer: *a, at: now} }()
	}
	switch {
	case path == "/Contacts" && req.Method == http.MethodGet:
		x.findContacts(a, req.URL.Query().Get("where"))
	case path == "/Contacts" && req.Method == http.MethodPost:
		x.saveContact(a, req)
	case path == "/PurchaseOrders" && req.Method == http.MethodGet:
		x.findOrders(a, req)
	case orders && req.Method == http.MethodPost:
		x.saveOrder(a, req, strings.TrimPrefix(strings.TrimPrefix(path, "/PurchaseOrders"), "/"))
	default:
		x.answer(a, http.StatusNotFound, "404 Not Found", `{"Title":"Not Found","Status":404}`)
	}
	return a, lost
}

// standInConn is the context key of a connection's request count.
type standInConn struct{}

// countRequests gives each connection a count of its requests, for
// reusedConn (an http.Server's ConnContext).
func countRequests(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, standInConn{}, new(atomic.Int64))
}

// reusedConn counts req on its connection and says whether an earlier
// request came on it.
func reusedConn(req *http.Request) bool {
	n, _ := req.Context().Value(standInConn{}).(*atomic.Int64)
	return n != nil && n.Add(1) > 1
}

// resentByGo says whether Go's http.Transport sends req again on its own
// when it came on a reused connection closed without an answer: a POST
// does when it carries an Idempotency-Key (or X-Idempotency-Key).
func resentByGo(req *http.Request) bool {
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

// hangUp closes the request's connection without answering it.
func hangUp(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
			return
		}
	}
	// No hijack: the server closes the connection of an aborted
	// handler, and nothing was written to it.
	panic(http.ErrAbortHandler)
}

func (x *XeroStandIn) answer(a *xeroAnswer, status int, count, body string) {
	x.counts[count]++
	a.status, a.body = status, body
}

// badRequest is Xero's answer to a body it cannot read.
func (x *XeroStandIn) badRequest(w *xeroAnswer, why string) {
	x.answer(w, http.StatusBadRequest, "400 Bad Request", fmt.Sprintf(
		`{"ErrorNumber":10,"Type":"ValidationException","Message":"A validation exception occurred","Elements":[{"ValidationErrors":[{"Message":%q}]}]}`, why))
}

// saveContact creates or updates the one contact of the body. A name
// another active contact has is refused as Xero refuses it: with
// summarizeErrors=false, 200 with the element's validation errors.
func (x *XeroStandIn) saveContact(w *xeroAnswer, req *http.Request) {
	var body struct {
		Contacts []map[string]any
	}
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<20)).Decode(&body); err != nil || len(body.Contacts) != 1 {
		x.badRequest(w, "a body of one contact is expected")
		return
	}
	in := body.Contacts[0]
	name, _ := in["Name"].(string)
	id, _ := in["ContactID"].(string)
	number, _ := in["ContactNumber"].(string)
	if name == "" && id == "" {
		x.badRequest(w, "The contact name must be specified.")
		return
	}
	if id != "" {
		if _, ok := x.contacts[id]; !ok {
			x.badRequest(w, "The contact could not be found.")
			return
		}
	}
	for _, c := range x.contacts {
		if c.ContactID != id && name != "" && strings.EqualFold(c.Name, name) {
			element, _ := json.Marshal(map[string]any{"Name": name, "ContactNumber": number, "HasValidationErrors": true,
				"StatusAttributeString": "ERROR", "ValidationErrors": []map[string]string{{"Message": fmt.Sprintf(
					"The contact name %s is already assigned to another contact. The contact name must be unique across all active contacts.", name)}}})
			if req.URL.Query().Get("summarizeErrors") == "false" {
				x.answer(w, http.StatusOK, "200 OK (duplicate name)", fmt.Sprintf(
					`{"Id":%q,"Status":"OK","Contacts":[%s]}`, newStandInID(), element))
				return
			}
			x.answer(w, http.StatusBadRequest, "400 Bad Request (duplicate name)", fmt.Sprintf(
				`{"ErrorNumber":10,"Type":"ValidationException","Message":"A validation exception occurred","Elements":[%s]}`, element))
			return
		}
	}
	count := "200 OK (contact update)"
	if id == "" {
		id, count = newStandInID(), "200 OK (contact create)"
	}
	c := x.contacts[id]
	c.ContactID, c.Fields = id, in
	if name != "" {
		c.Name = name
	}
	if number != "" {
		c.ContactNumber = number
	}
	x.contacts[id] = c
	out, _ := json.Marshal(map[string]any{"Id": newStandInID(), "Status": "OK", "Contacts": []any{xeroContactJSON(c)}})
	x.answer(w, http.StatusOK, count, string(out))
}

// xeroWhere is the one filter form the stand-in reads: Field=="value".
var xeroWhere = regexp.MustCompile(`^\s*(ContactNumber|Name)\s*==\s*"((?:[^"\\]|\\.)*)"\s*$`)

func (x *XeroStandIn) findContacts(w *xeroAnswer, where string) {
	m := xeroWhere.FindStringSubmatch(where)
	if m == nil {
		x.badRequest(w, "unsupported where filter: "+where)
		return
	}
	value := strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(m[2])
	found := []any{}
	for _, c := range x.contacts {
		if (m[1] == "ContactNumber" && c.ContactNumber == value) || (m[1] == "Name" && c.Name == value) {
			found = append(found, xeroContactJSON(c))
		}
	}
	out, _ := json.Marshal(map[string]any{"Id": newStandInID(), "Status": "OK", "Contacts": found})
	x.answer(w, http.StatusOK, "200 OK (contact search)", string(out))
}

func xeroContactJSON(c XeroContact) map[string]any {
	return map[string]any{"ContactID": c.ContactID, "Name": c.Name, "ContactNumber": c.ContactNumber,
		"ContactStatus": "ACTIVE", "IsSupplier": true, "HasValidationErrors": false}
}

// saveOrder creates (id empty) or updates one purchase order; its contact
// must exist. Its Date and Status, when the body has none, are those it
// had, or on a create the day of Now and DRAFT.
func (x *XeroStandIn) saveOrder(w *xeroAnswer, req *http.Request, id string) {
	var body struct {
		PurchaseOrders []struct {
			Reference string
			Date      string
			Status    string
			Contact   struct{ ContactID string }
			LineItems []json.RawMessage
		}
	}
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<20)).Decode(&body); err != nil || len(body.PurchaseOrders) != 1 {
		x.badRequest(w, "a body of one purchase order is expected")
		return
	}
	po := body.PurchaseOrders[0]
	if _, ok := x.contacts[po.Contact.ContactID]; !ok {
		x.badRequest(w, "The contact could not be found.")
		return
	}
	date, ok := xeroDay(po.Date)
	if !ok {
		x.badRequest(w, "The Date "+po.Date+" is not a date.")
		return
	}
	old, had := x.orders[id]
	if id != "" && !had {
		x.answer(w, http.StatusNotFound, "404 Not Found", `{"Title":"Not Found","Status":404}`)
		return
	}
	o := XeroOrder{PurchaseOrderID: id, PurchaseOrderNumber: old.PurchaseOrderNumber, Reference: po.Reference,
		ContactID: po.Contact.ContactID, Date: cmp.Or(date, old.Date), Status: cmp.Or(po.Status, old.Status), Lines: len(po.LineItems)}
	count := "200 OK (update)"
	if id == "" {
		o.PurchaseOrderID, o.Date, o.Status = newStandInID(), cmp.Or(date, x.now().UTC().Format(time.DateOnly)), cmp.Or(po.Status, "DRAFT")
		count = "200 OK (create)"
		x.addOrder(o)
		o = x.orders[o.PurchaseOrderID]
	} else {
		x.orders[id] = o
	}
	x.answer(w, http.StatusOK, count, fmt.Sprintf(
		`{"Status":"OK","PurchaseOrders":[{"PurchaseOrderID":%q,"PurchaseOrderNumber":%q,"Reference":%q,"Status":%q,"Contact":{"ContactID":%q}}]}`,
		o.PurchaseOrderID, o.PurchaseOrderNumber, o.Reference, o.Status, o.ContactID))
}

// xeroDay is the day of a Date, "2019-03-12" or "2019-03-12T00:00:00",
// and whether it is one; "" is no day.
func xeroDay(date string) (string, bool) {
	if date == "" {
		return "", true
	}
	day, rest, _ := strings.Cut(date, "T")
	if _, err := time.Parse(time.DateOnly, day); err != nil {
		return "", false
	}
	if rest != "" {
		if _, err := time.Parse("15:04:05", rest); err != nil {
			return "", false
		}
	}
	return day, true
}

// findOrders lists the purchase orders in creation order, those of the
// days DateFrom to DateTo (both included) when given, a page of them
// (page from 1, pageSize 100 unless given), with Xero's pagination.
func (x *XeroStandIn) findOrders(w *xeroAnswer, req *http.Request) {
	q := req.URL.Query()
	var from, to string
	for _, p := range []struct {
		name string
		day  *string
	}{{"DateFrom", &from}, {"DateTo", &to}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		if _, err := time.Parse(time.DateOnly, v); err != nil {
			x.badRequest(w, p.name+" "+v+" is not a date (YYYY-MM-DD).")
			return
		}
		*p.day = v
	}
	page, pageSize := 1, 100
	for _, p := range []struct {
		name string
		n    *int
	}{{"page", &page}, {"pageSize", &pageSize}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			x.badRequest(w, p.name+" "+v+" is not a whole number from 1.")
			return
		}
		*p.n = n
	}
	var match []XeroOrder
	for _, id := range x.made {
		o := x.orders[id]
		if (from == "" || o.Date >= from) && (to == "" || o.Date <= to) {
			match = append(match, o)
		}
	}
	found := []any{}
	for i := (page - 1) * pageSize; i < len(match) && i < page*pageSize; i++ {
		found = append(found, x.orderJSON(match[i]))
	}
	out, _ := json.Marshal(map[string]any{"Id": newStandInID(), "Status": "OK", "ProviderName": "integration-outbox stand-in",
		"pagination": map[string]int{"page": page, "pageSize": pageSize,
			"pageCount": (len(match) + pageSize - 1) / pageSize, "itemCount": len(match)},
		"PurchaseOrders": found})
	x.answer(w, http.StatusOK, "200 OK (order search)", string(out))
}

// orderJSON is an order as a list of them shows it.
func (x *XeroStandIn) orderJSON(o XeroOrder) map[string]any {
	day, _ := time.Parse(time.DateOnly, o.Date)
	return map[string]any{"PurchaseOrderID": o.PurchaseOrderID, "PurchaseOrderNumber": o.PurchaseOrderNumber,
		"Reference": o.Reference, "DateString": day.Format("2006-01-02T15:04:05"),
		"Date": fmt.Sprintf("/Date(%d+0000)/", day.UnixMilli()), "Status": o.Status,
		"Contact": map[string]string{"ContactID": o.ContactID, "Name": x.contacts[o.ContactID].Name}}
}

// AddContact puts a contact there as if someone had created it in Xero.
func (x *XeroStandIn) AddContact(name, number string) string {
	x.mu.Lock()
	defer x.mu.Unlock()
	id := newStandInID()
	x.contacts[id] = XeroContact{ContactID: id, Name: name, ContactNumber: number}
	return id
}

// newStandInID is a random version-4 UUID.
func newStandInID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
