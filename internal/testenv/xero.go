package testenv

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"
)

// XeroStandIn is a LOCAL STAND-IN of Xero's accounting API, for the demo
// and the end-to-end tests: it answers POST /api.xro/2.0/Contacts (create,
// or update with a ContactID; a second active contact of one name is
// refused with Xero's validation error), GET /api.xro/2.0/Contacts with a
// where filter on ContactNumber or Name, and POST
// /api.xro/2.0/PurchaseOrders (create) and /PurchaseOrders/{id} (update),
// whose Contact must be one of its contacts, the way Xero's reference
// documents them. It checks the bearer token and the tenant header, and
// keeps what it got. It is not Xero: the provider's own tests replay Xero's
// documented answers (internal/provider/testdata/xero).
type XeroStandIn struct {
	URL    string // base of the API: URL + "/api.xro/2.0"
	Tenant string
	Token  string
	// Authorize, when set, replaces the check against Token: it says
	// whether the bearer token is live (an authorization server's tokens
	// that expire and rotate). Set it before the first request.
	Authorize func(token string) bool

	srv *http.Server
	mu  sync.Mutex
	// Counts is how many requests got each answer ("200 OK (create)", …).
	counts   map[string]int
	contacts map[string]XeroContact // by ContactID
	orders   map[string]XeroOrder   // by PurchaseOrderID
}

// XeroContact is a contact the stand-in holds.
type XeroContact struct {
	ContactID, Name, ContactNumber string
	// Fields is the last body element that created or updated it.
	Fields map[string]any
}

// XeroOrder is a purchase order the stand-in holds.
type XeroOrder struct {
	PurchaseOrderID, Reference, ContactID string
	Lines                                 int
}

// StartXeroStandIn serves a XeroStandIn on a free loopback port; Close
// stops it.
func StartXeroStandIn(tenant, token string) (*XeroStandIn, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	x := &XeroStandIn{URL: "http://" + l.Addr().String(), Tenant: tenant, Token: token, counts: map[string]int{},
		contacts: map[string]XeroContact{}, orders: map[string]XeroOrder{}}
	x.srv = &http.Server{Handler: http.HandlerFunc(x.serve), ReadHeaderTimeout: 5 * time.Second}
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

// Orders returns the purchase orders it holds.
func (x *XeroStandIn) Orders() []XeroOrder {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]XeroOrder, 0, len(x.orders))
	for _, o := range x.orders {
		out = append(out, o)
	}
	return out
}

const xeroAPI = "/api.xro/2.0"

func (x *XeroStandIn) serve(w http.ResponseWriter, req *http.Request) {
	x.mu.Lock()
	defer x.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	token, _ := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	live := token == x.Token
	if x.Authorize != nil {
		live = x.Authorize(token)
	}
	if !live || req.Header.Get("xero-tenant-id") != x.Tenant {
		x.answer(w, http.StatusUnauthorized, "401 Unauthorized", `{"Title":"Unauthorized","Status":401,"Detail":"AuthenticationUnsuccessful"}`)
		return
	}
	path := strings.TrimPrefix(req.URL.Path, xeroAPI)
	switch {
	case path == "/Contacts" && req.Method == http.MethodGet:
		x.findContacts(w, req.URL.Query().Get("where"))
	case path == "/Contacts" && req.Method == http.MethodPost:
		x.saveContact(w, req)
	case (path == "/PurchaseOrders" || strings.HasPrefix(path, "/PurchaseOrders/")) && req.Method == http.MethodPost:
		x.saveOrder(w, req, strings.TrimPrefix(strings.TrimPrefix(path, "/PurchaseOrders"), "/"))
	default:
		x.answer(w, http.StatusNotFound, "404 Not Found", `{"Title":"Not Found","Status":404}`)
	}
}

func (x *XeroStandIn) answer(w http.ResponseWriter, status int, count, body string) {
	x.counts[count]++
	w.WriteHeader(status)
	io.WriteString(w, body)
}

// badRequest is Xero's answer to a body it cannot read.
func (x *XeroStandIn) badRequest(w http.ResponseWriter, why string) {
	x.answer(w, http.StatusBadRequest, "400 Bad Request", fmt.Sprintf(
		`{"ErrorNumber":10,"Type":"ValidationException","Message":"A validation exception occurred","Elements":[{"ValidationErrors":[{"Message":%q}]}]}`, why))
}

// saveContact creates or updates the one contact of the body. A name
// another active contact has is refused as Xero refuses it: with
// summarizeErrors=false, 200 with the element's validation errors.
func (x *XeroStandIn) saveContact(w http.ResponseWriter, req *http.Request) {
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

func (x *XeroStandIn) findContacts(w http.ResponseWriter, where string) {
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
// must exist.
func (x *XeroStandIn) saveOrder(w http.ResponseWriter, req *http.Request, id string) {
	var body struct {
		PurchaseOrders []struct {
			Reference string
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
	count := "200 OK (update)"
	if id == "" {
		id, count = newStandInID(), "200 OK (create)"
	} else if _, ok := x.orders[id]; !ok {
		x.answer(w, http.StatusNotFound, "404 Not Found", `{"Title":"Not Found","Status":404}`)
		return
	}
	x.orders[id] = XeroOrder{PurchaseOrderID: id, Reference: po.Reference, ContactID: po.Contact.ContactID, Lines: len(po.LineItems)}
	x.answer(w, http.StatusOK, count, fmt.Sprintf(
		`{"Status":"OK","PurchaseOrders":[{"PurchaseOrderID":%q,"Reference":%q,"Status":%q,"Contact":{"ContactID":%q}}]}`,
		id, po.Reference, po.Status, po.Contact.ContactID))
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
