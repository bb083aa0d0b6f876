package testenv

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"integration-outbox/internal/testenv/qboschema"
)

// QuickBooksStandIn is a LOCAL STAND-IN of QuickBooks Online's accounting
// API v3 for one company (realm), for the provider's tests and the
// end-to-end runs. Every body it is sent must be valid against Intuit's own
// data model (qboschema, derived from the XSD of Intuit's Java SDK) and the
// rules Intuit's API reference adds (each named where it is checked);
// anything else is answered with QuickBooks' ValidationFault, and kept in
// Refusals, so a test sees what was wrong. It answers:
//
//   - POST /v3/company/{realm}/purchaseorder: create, or update (Id and
//     SyncToken, sparse or full)
//   - GET /v3/company/{realm}/purchaseorder/{id}
//   - POST /v3/company/{realm}/vendor: create, or update
//   - GET /v3/company/{realm}/vendor/{id}
//   - GET /v3/company/{realm}/query?query=select * from Vendor where DisplayName = '…'
//   - GET /v3/company/{realm}/query?query=select * from PurchaseOrder where DocNumber = '…'
//
// each with ?minorversion=, the bearer token checked. A POST with a
// requestid it answered before gets that answer again (ReplayWindow).
// It is not QuickBooks: the provider's answer reading is tested on
// Intuit's documented answers (internal/provider/testdata/quickbooks).
type QuickBooksStandIn struct {
	URL   string // the apiBaseUrl: URL + "/v3/company/{realm}/…"
	Realm string
	Token string
	// APAccounts is how many accounts-payable accounts the company has
	// (default 1): with more than one, a purchase order must name its
	// APAccountRef. Set it before the first request.
	APAccounts int
	// ReplayWindow is how long a requestid is remembered after its first
	// use: a requestid used ReplayWindow or more before Now is forgotten,
	// and its request served as new. 0 keeps them for ever. Set it before
	// the first request.
	ReplayWindow time.Duration
	// Now is the stand-in's clock (nil: time.Now): it times the
	// requestids and dates a purchase order made without a TxnDate. Set
	// it before the first request.
	Now func() time.Time
	// Before, when set, is called with each request whose token and
	// company pass. A status other than 0 is answered, with header and
	// body, instead of serving the request (not kept in Refusals). It is
	// read under the stand-in's lock and called outside it: set it before
	// the first request, or take care of its use yourself. It should not
	// read the request's body, which the stand-in reads after.
	Before func(req *http.Request) (status int, header http.Header, body string)

	srv *http.Server
	mu  sync.Mutex
	// answered keeps the answer to each requestid: a repeated requestid
	// gets the first answer again and changes nothing (Intuit's reference,
	// "Idempotency": the requestid query parameter).
	answered map[string]qboKept
	orders   map[string]*QuickBooksObject // by Id
	vendors  map[string]*QuickBooksObject // by Id
	nextID   int
	requests int
	replays  int
	lose     int // how many purchase order creates' answers to lose
	refusals []string
}

// QuickBooksObject is an entity the stand-in holds: its Id, its SyncToken
// and its fields as the last create or update left them.
type QuickBooksObject struct {
	ID, SyncToken string
	Fields        map[string]any
	day           string // the day (UTC) it was made: its TxnDate unless it has one
}

type qboReply struct {
	status int
	header http.Header // besides the Content-Type and intuit_tid
	body   []byte
}

// qboKept is the first answer to a requestid and when it was used.
type qboKept struct {
	reply qboReply
	at    time.Time
}

// StartQuickBooksStandIn serves a QuickBooksStandIn on a free loopback
// port; Close stops it.
func StartQuickBooksStandIn(realm, token string) (*QuickBooksStandIn, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	q := &QuickBooksStandIn{URL: "http://" + l.Addr().String(), Realm: realm, Token: token, APAccounts: 1,
		answered: map[string]qboKept{}, orders: map[string]*QuickBooksObject{}, vendors: map[string]*QuickBooksObject{}, nextID: 40}
	q.srv = &http.Server{Handler: http.HandlerFunc(q.serve), ReadHeaderTimeout: 5 * time.Second, ConnContext: countRequests}
	go q.srv.Serve(l)
	return q, nil
}

// Close stops the server.
func (q *QuickBooksStandIn) Close() { q.srv.Close() }

// AddVendor puts a vendor there as if someone had created it in
// QuickBooks, and returns its Id.
func (q *QuickBooksStandIn) AddVendor(displayName string) string {
	q.mu.Lock()
	defer q.mu.Unlock()
	id := q.newID()
	q.vendors[id] = &QuickBooksObject{ID: id, SyncToken: "0", Fields: map[string]any{"DisplayName": displayName}}
	return id
}

// AddPurchaseOrder puts a purchase order there, numbered docNumber, for
// the vendor vendorID, as if someone had created it in QuickBooks, and
// returns its Id.
func (q *QuickBooksStandIn) AddPurchaseOrder(docNumber, vendorID string) string {
	q.mu.Lock()
	defer q.mu.Unlock()
	id := q.newID()
	q.orders[id] = &QuickBooksObject{ID: id, SyncToken: "0", day: q.today(),
		Fields: map[string]any{"DocNumber": docNumber, "VendorRef": map[string]any{"value": vendorID}}}
	return id
}

// LoseAnswers makes it lose the answers to the next n POSTs that create a
// purchase order (a body without Id): each is served in full (the order
// made, its requestid's answer remembered), but its connection is closed
// without an answer. As with XeroStandIn.LoseAnswers, one that Go's
// http.Transport would send again is closed unserved on a reused
// connection.
func (q *QuickBooksStandIn) LoseAnswers(n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.lose = n
}

// Replays is how many requests got the answer kept for their requestid.
func (q *QuickBooksStandIn) Replays() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.replays
}

// Touch changes an entity's SyncToken as an edit in QuickBooks would.
func (q *QuickBooksStandIn) Touch(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range []map[string]*QuickBooksObject{q.orders, q.vendors} {
		if o := m[id]; o != nil {
			o.SyncToken = bump(o.SyncToken)
		}
	}
}

// PurchaseOrders returns the purchase orders it holds.
func (q *QuickBooksStandIn) PurchaseOrders() []QuickBooksObject { return q.list(q.orders) }

// Vendors returns the vendors it holds.
func (q *QuickBooksStandIn) Vendors() []QuickBooksObject { return q.list(q.vendors) }

// Requests is how many requests it got.
func (q *QuickBooksStandIn) Requests() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.requests
}

// Refusals are the faults it answered, "code message: detail", in order.
func (q *QuickBooksStandIn) Refusals() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]string(nil), q.refusals...)
}

func (q *QuickBooksStandIn) list(m map[string]*QuickBooksObject) []QuickBooksObject {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]QuickBooksObject, 0, len(m))
	for _, o := range m {
		out = append(out, *o)
	}
	return out
}

func (q *QuickBooksStandIn) newID() string {
	q.nextID++
	return strconv.Itoa(q.nextID)
}

func (q *QuickBooksStandIn) now() time.Time {
	if q.Now != nil {
		return q.Now()
	}
	return time.Now()
}

// today is the day of Now in UTC, YYYY-MM-DD.
func (q *QuickBooksStandIn) today() string { return q.now().UTC().Format(time.DateOnly) }

func bump(token string) string {
	n, _ := strconv.Atoi(token)
	return strconv.Itoa(n + 1)
}

// fault is a QuickBooks Fault: its HTTP status, type, code, message and
// detail.
type fault struct {
	status                 int
	typ, code, msg, detail string
}

func (f fault) reply() qboReply {
	body, _ := json.Marshal(map[string]any{"Fault": map[string]any{"Error": []map[string]string{
		{"Message": f.msg, "Detail": f.detail, "code": f.code, "element": ""}}, "type": f.typ},
		"time": time.Now().Format(time.RFC3339)})
	return qboReply{status: f.status, body: body}
}

// validation is a ValidationFault answered 400.
func validation(code, msg, detail string) *fault {
	return &fault{status: http.StatusBadRequest, typ: "ValidationFault", code: code, msg: msg, detail: detail}
}

func (q *QuickBooksStandIn) serve(w http.ResponseWriter, req *http.Request) {
	r, tid, lost := q.handle(req, reusedConn(req))
	if lost {
		hangUp(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	for k, v := range r.header {
		w.Header()[k] = v
	}
	w.Header().Set("intuit_tid", tid)
	w.WriteHeader(r.status)
	w.Write(r.body)
}

// handle works out the answer to req, which came on a connection reused
// or not, its intuit_tid, and whether to lose it.
func (q *QuickBooksStandIn) handle(req *http.Request, reused bool) (r qboReply, tid string, lost bool) {
	q.mu.Lock()
	q.requests++
	tid = "stand-in-" + strconv.Itoa(q.requests)
	rest, refused := q.authorize(req)
	before := q.Before
	q.mu.Unlock()
	if refused == nil && before != nil {
		if status, header, body := before(req); status != 0 {
			return qboReply{status: status, header: header, body: []byte(body)}, tid, false
		}
	}

	q.mu.Lock()
	defer q.mu.Unlock()
	if refused != nil {
		r = *refused
	} else {
		r, lost = q.answer(req, rest, reused)
	}
	if r.status >= 300 {
		var f struct {
			Fault struct {
				Error []struct{ Message, Detail, Code string }
			}
		}
		json.Unmarshal(r.body, &f)
		for _, e := range f.Fault.Error {
			q.refusals = append(q.refusals, e.Code+" "+e.Message+": "+e.Detail)
		}
	}
	return r, tid, lost
}

// authorize checks the bearer token and the company: it returns the path
// after /v3/company/{realm}/, or the fault answered when either is wrong.
func (q *QuickBooksStandIn) authorize(req *http.Request) (string, *qboReply) {
	if req.Header.Get("Authorization") != "Bearer "+q.Token {
		r := fault{status: http.StatusUnauthorized, typ: "AUTHENTICATION", code: "3200",
			msg: "message=AuthenticationFailed; errorCode=003200; statusCode=401", detail: "Token invalid"}.reply()
		return "", &r
	}
	prefix := "/v3/company/" + q.Realm + "/"
	rest, ok := strings.CutPrefix(req.URL.Path, prefix)
	if !ok {
		r := fault{status: http.StatusForbidden, typ: "AuthorizationFault", code: "5020",
			msg: "Permission Denied Error", detail: "the token's company is " + q.Realm}.reply()
		return "", &r
	}
	return rest, nil
}

// answer serves an authorized request for rest, the path after the
// company's, which came on a connection reused or not, and says whether to
// lose the answer.
func (q *QuickBooksStandIn) answer(req *http.Request, rest string, reused bool) (qboReply, bool) {
	if req.URL.Query().Get("minorversion") == "" {
		return validation("2010", "Request has invalid or unsupported property", "minorversion is expected on every request").reply(), false
	}
	entity, id, _ := strings.Cut(rest, "/")
	switch {
	case req.Method == http.MethodGet && entity == "query":
		return q.query(req.URL.Query().Get("query")), false
	case req.Method == http.MethodGet && (entity == "purchaseorder" || entity == "vendor") && id != "":
		return q.read(entity, id), false
	case req.Method == http.MethodPost && (entity == "purchaseorder" || entity == "vendor") && id == "":
		body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
		lost := false
		if entity == "purchaseorder" && err == nil && q.lose > 0 {
			var head struct{ Id *string }
			if json.Unmarshal(body, &head) == nil && head.Id == nil {
				if reused && resentByGo(req) {
					return qboReply{}, true
				}
				q.lose--
				lost = true
			}
		}
		rid, now := req.URL.Query().Get("requestid"), q.now()
		if k, ok := q.answered[rid]; ok && rid != "" && (q.ReplayWindow <= 0 || now.Sub(k.at) < q.ReplayWindow) {
			q.replays++
			return k.reply, lost
		}
		var r qboReply
		if err != nil {
			r = validation("2010", "Request has invalid or unsupported property", "the body could not be read").reply()
		} else {
			r = q.write(entity, body)
		}
		if rid != "" {
			q.answered[rid] = qboKept{reply: r, at: now}
		}
		return r, lost
	}
	return fault{status: http.StatusNotFound, typ: "ValidationFault", code: "610", msg: "Object Not Found",
		detail: req.Method + " " + req.URL.Path + " is not an operation of this stand-in"}.reply(), false
}

// key is the JSON key of an entity, its path's name.
var qboKey = map[string]string{"purchaseorder": "PurchaseOrder", "vendor": "Vendor"}

func (q *QuickBooksStandIn) store(entity string) map[string]*QuickBooksObject {
	if entity == "vendor" {
		return q.vendors
	}
	return q.orders
}

func (q *QuickBooksStandIn) read(entity, id string) qboReply {
	o := q.store(entity)[id]
	if o == nil {
		return validation("610", "Object Not Found", "Object Not Found : Something you're trying to use has been made inactive. Check the fields with accounts, customers, items, vendors or employees.").reply()
	}
	return q.entityReply(entity, o)
}

func (q *QuickBooksStandIn) entityReply(entity string, o *QuickBooksObject) qboReply {
	fields := map[string]any{}
	for k, v := range o.Fields {
		fields[k] = v
	}
	delete(fields, "sparse")
	fields["Id"], fields["SyncToken"], fields["domain"] = o.ID, o.SyncToken, "QBO"
	body, _ := json.Marshal(map[string]any{qboKey[entity]: fields, "time": time.Now().Format(time.RFC3339)})
	return qboReply{status: http.StatusOK, body: body}
}

// write creates or updates an entity after checking its body.
func (q *QuickBooksStandIn) write(entity string, body []byte) qboReply {
	if err := qboschema.Validate(qboKey[entity], body); err != nil {
		return validation("2010", "Request has invalid or unsupported property", err.Error()).reply()
	}
	var fields map[string]any
	if err := json.Unmarshal(body, &fields); err != nil {
		return validation("2010", "Request has invalid or unsupported property", err.Error()).reply()
	}
	var f *fault
	if entity == "vendor" {
		f = q.checkVendor(fields)
	} else {
		f = q.checkPurchaseOrder(fields)
	}
	if f != nil {
		return f.reply()
	}
	store := q.store(entity)
	id, _ := fields["Id"].(string)
	if id == "" {
		if _, has := fields["SyncToken"]; has {
			// Intuit's reference: an update needs the Id of the entity.
			return validation("2020", "Required param missing, need to supply the required value for the API",
				"Required parameter Id is missing in the request").reply()
		}
		o := &QuickBooksObject{ID: q.newID(), SyncToken: "0", Fields: fields, day: q.today()}
		store[o.ID] = o
		return q.entityReply(entity, o)
	}
	o := store[id]
	if o == nil {
		return validation("610", "Object Not Found", "Object Not Found : the "+qboKey[entity]+" "+id+" does not exist").reply()
	}
	// Intuit's reference ("Update a purchase order", "Sparse update a
	// vendor"): an update carries the Id and the current SyncToken;
	// another SyncToken is error 5010.
	token, _ := fields["SyncToken"].(string)
	if token == "" {
		return validation("2020", "Required param missing, need to supply the required value for the API",
			"Required parameter SyncToken is missing in the request").reply()
	}
	if token != o.SyncToken {
		return validation("5010", "Stale Object Error", "Stale Object Error : You and another user were working on the same thing. "+
			"The other user finished before you did, so your work was not saved.").reply()
	}
	if sparse, _ := fields["sparse"].(bool); sparse {
		for k, v := range fields {
			o.Fields[k] = v
		}
	} else {
		o.Fields = fields
	}
	o.SyncToken = bump(o.SyncToken)
	return q.entityReply(entity, o)
}

// ref is the value of a ReferenceType field, "" when absent.
func ref(fields map[string]any, key string) string {
	r, _ := fields[key].(map[string]any)
	v, _ := r["value"].(string)
	return v
}

// checkPurchaseOrder applies the rules Intuit's API reference for the
// PurchaseOrder entity adds to the XSD (its "Create a purchase order"
// required fields).
func (q *QuickBooksStandIn) checkPurchaseOrder(fields map[string]any) *fault {
	sparse, _ := fields["sparse"].(bool)
	required := func(what string) *fault {
		return validation("2020", "Required param missing, need to supply the required value for the API",
			"Required parameter "+what+" is missing in the request")
	}
	// PurchaseOrder: VendorRef is required.
	vendor := ref(fields, "VendorRef")
	switch {
	case vendor == "" && !sparse:
		return required("VendorRef")
	case vendor != "" && q.vendors[vendor] == nil:
		// Error code 2500, "Invalid Reference Id".
		return validation("2500", "Invalid Reference Id", "Invalid Reference Id : Vendor assigned to this transaction has been deleted. "+
			"Before you can modify this transaction, you must restore "+vendor)
	}
	// PurchaseOrder: APAccountRef is required where the company has more
	// than one accounts-payable account ("Required if more than one
	// Accounts Payable account exists").
	if q.APAccounts > 1 && ref(fields, "APAccountRef") == "" && !sparse {
		return required("APAccountRef (the company has " + strconv.Itoa(q.APAccounts) + " accounts-payable accounts)")
	}
	// PurchaseOrder: Line is required, at least one line.
	lines, _ := fields["Line"].([]any)
	if len(lines) == 0 && (!sparse || fields["Line"] != nil) {
		return required("Line")
	}
	for n, l := range lines {
		line, _ := l.(map[string]any)
		kind, _ := line["DetailType"].(string)
		detail, _ := line[kind].(map[string]any)
		switch kind {
		// The DetailType names the detail object the line carries
		// (Line: "DetailType: set to ItemBasedExpenseLineDetail" and so
		// on); a purchase order takes item and account lines.
		case "ItemBasedExpenseLineDetail":
			if detail == nil || ref(detail, "ItemRef") == "" {
				// ItemBasedExpenseLineDetail.ItemRef is required.
				return required(fmt.Sprintf("Line[%d].ItemBasedExpenseLineDetail.ItemRef", n))
			}
		case "AccountBasedExpenseLineDetail":
			if detail == nil || ref(detail, "AccountRef") == "" {
				// AccountBasedExpenseLineDetail.AccountRef is required.
				return required(fmt.Sprintf("Line[%d].AccountBasedExpenseLineDetail.AccountRef", n))
			}
		default:
			return validation("2010", "Request has invalid or unsupported property",
				fmt.Sprintf("Line[%d].DetailType %q is not a line of a purchase order", n, kind))
		}
		if _, ok := line["Amount"]; !ok {
			// Line.Amount is required.
			return required(fmt.Sprintf("Line[%d].Amount", n))
		}
	}
	return nil
}

// checkVendor applies the rules Intuit's API reference for the Vendor
// entity adds: a DisplayName (or name parts) is required, and it is unique
// among vendors, customers and employees (error 6240).
func (q *QuickBooksStandIn) checkVendor(fields map[string]any) *fault {
	name, _ := fields["DisplayName"].(string)
	sparse, _ := fields["sparse"].(bool)
	if name == "" && !sparse {
		return validation("2020", "Required param missing, need to supply the required value for the API",
			"Required parameter DisplayName is missing in the request")
	}
	id, _ := fields["Id"].(string)
	for _, v := range q.vendors {
		if other, _ := v.Fields["DisplayName"].(string); name != "" && v.ID != id && strings.EqualFold(other, name) {
			return validation("6240", "Duplicate Name Exists Error", "The name supplied already exists. : Id="+v.ID)
		}
	}
	return nil
}

// query answers "select * from Vendor where DisplayName = '…'" (the name
// matched ignoring case) and "select * from PurchaseOrder where DocNumber =
// '…'" (the number matched exactly), quotes escaped with a backslash, the
// queries the provider makes. What it finds is in the order of its Ids.
func (q *QuickBooksStandIn) query(text string) qboReply {
	const vendor, order = "select * from Vendor where DisplayName = '", "select * from PurchaseOrder where DocNumber = '"
	prefix := vendor
	if strings.HasPrefix(text, order) {
		prefix = order
	}
	if !strings.HasPrefix(text, prefix) || !strings.HasSuffix(text, "'") || len(text) <= len(prefix) {
		return validation("4000", "Error parsing query", "QueryParserError: this stand-in answers "+vendor+"…' and "+order+"…' only").reply()
	}
	value := strings.ReplaceAll(text[len(prefix):len(text)-1], `\'`, `'`)
	key := "Vendor"
	var found []map[string]any
	if prefix == vendor {
		for _, v := range byID(q.vendors) {
			if other, _ := v.Fields["DisplayName"].(string); strings.EqualFold(other, value) {
				found = append(found, map[string]any{"Id": v.ID, "SyncToken": v.SyncToken, "DisplayName": other})
			}
		}
	} else {
		key = "PurchaseOrder"
		for _, o := range byID(q.orders) {
			if number, _ := o.Fields["DocNumber"].(string); number == value {
				day, _ := o.Fields["TxnDate"].(string)
				if day == "" {
					day = o.day
				}
				found = append(found, map[string]any{"Id": o.ID, "SyncToken": o.SyncToken, "DocNumber": number,
					"VendorRef": map[string]any{"value": ref(o.Fields, "VendorRef")}, "TxnDate": day})
			}
		}
	}
	resp := map[string]any{}
	if len(found) > 0 {
		resp = map[string]any{key: found, "startPosition": 1, "maxResults": len(found)}
	}
	body, _ := json.Marshal(map[string]any{"QueryResponse": resp, "time": time.Now().Format(time.RFC3339)})
	return qboReply{status: http.StatusOK, body: body}
}

// byID is the entities of m in the order of their Ids (numbers).
func byID(m map[string]*QuickBooksObject) []*QuickBooksObject {
	out := make([]*QuickBooksObject, 0, len(m))
	for _, o := range m {
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b *QuickBooksObject) int {
		i, _ := strconv.Atoi(a.ID)
		j, _ := strconv.Atoi(b.ID)
		return i - j
	})
	return out
}

// QuickBooksConfig is the config_json of a quickbooks connection to q,
// with extra keys (expenseAccountId, apAccountId…) added.
func (q *QuickBooksStandIn) QuickBooksConfig(extra map[string]string) map[string]string {
	c := map[string]string{"realmId": q.Realm, "apiBaseUrl": q.URL}
	for k, v := range extra {
		c[k] = v
	}
	return c
}
