package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"integration-outbox/internal/credential"
)

// Xero's contact as we send it, in its field names
// (testdata/xero_contacts.schema.json). Only the fields the host gave are
// sent: on an update, a field the host left empty keeps its value in Xero.
type (
	xeroContacts struct {
		Contacts []xeroContactBody `json:"Contacts"`
	}
	xeroContactBody struct {
		ContactID       string        `json:"ContactID,omitempty"`
		Name            string        `json:"Name"`
		ContactNumber   string        `json:"ContactNumber,omitempty"`
		EmailAddress    string        `json:"EmailAddress,omitempty"`
		TaxNumber       string        `json:"TaxNumber,omitempty"`
		DefaultCurrency string        `json:"DefaultCurrency,omitempty"`
		Addresses       []xeroAddress `json:"Addresses,omitempty"`
		Phones          []xeroPhone   `json:"Phones,omitempty"`
	}
	xeroAddress struct {
		AddressType  string `json:"AddressType"`
		AddressLine1 string `json:"AddressLine1,omitempty"`
		AddressLine2 string `json:"AddressLine2,omitempty"`
		AddressLine3 string `json:"AddressLine3,omitempty"`
		AddressLine4 string `json:"AddressLine4,omitempty"`
		City         string `json:"City,omitempty"`
		PostalCode   string `json:"PostalCode,omitempty"`
		Country      string `json:"Country,omitempty"`
	}
	xeroPhone struct {
		PhoneType   string `json:"PhoneType"`
		PhoneNumber string `json:"PhoneNumber"`
	}
)

// xeroContactRequest builds the request body of cmd: a new contact, or an
// update of the one an earlier push created or linked (cmd.Document).
func xeroContactRequest(cmd SupplierPush) ([]byte, error) {
	s := cmd.Supplier
	if strings.TrimSpace(s.Name) == "" {
		return nil, payloadError("payload_json.name: missing or empty")
	}
	limits := []fieldLimit{
		{"name", s.Name, "Xero's contact Name", 255},
		{"code", s.Code, "Xero's ContactNumber", 50},
		{"email", s.Email, "Xero's EmailAddress", 255},
		{"taxNumber", s.TaxNumber, "Xero's TaxNumber", 50},
		{"phone", s.Phone, "Xero's PhoneNumber", 50},
		{"city", s.City, "Xero's address City", 255},
		{"postalCode", s.PostalCode, "Xero's address PostalCode", 50},
		{"country", s.Country, "Xero's address Country", 50},
	}
	if len(s.AddressLines) > 4 {
		return nil, payloadError("payload_json.addressLines: %d lines; Xero's address has 4", len(s.AddressLines))
	}
	for i, l := range s.AddressLines {
		limits = append(limits, fieldLimit{fmt.Sprintf("addressLines[%d]", i), l, fmt.Sprintf("Xero's AddressLine%d", i+1), 500})
	}
	if err := checkLengths(limits); err != nil {
		return nil, err
	}
	if err := supplierCurrency(s.CurrencyCode); err != nil {
		return nil, err
	}
	c := xeroContactBody{Name: s.Name, ContactNumber: s.Code, EmailAddress: s.Email, TaxNumber: s.TaxNumber,
		DefaultCurrency: s.CurrencyCode}
	if cmd.Document != nil {
		if !isGUID(cmd.Document.ID) {
			return nil, payloadError("the supplier's remembered contact %q is not a Xero ContactID (a GUID)", cmd.Document.ID)
		}
		c.ContactID = cmd.Document.ID
	}
	if s.Phone != "" {
		c.Phones = []xeroPhone{{PhoneType: "DEFAULT", PhoneNumber: s.Phone}}
	}
	if len(s.AddressLines) > 0 || s.City != "" || s.PostalCode != "" || s.Country != "" {
		// POBOX is the contact's postal address: the one Xero prints on the
		// purchase orders sent to the supplier.
		a := xeroAddress{AddressType: "POBOX", City: s.City, PostalCode: s.PostalCode, Country: s.Country}
		for i, l := range s.AddressLines {
			*[]*string{&a.AddressLine1, &a.AddressLine2, &a.AddressLine3, &a.AddressLine4}[i] = l
		}
		c.Addresses = []xeroAddress{a}
	}
	body, err := json.Marshal(xeroContacts{Contacts: []xeroContactBody{c}})
	if err != nil {
		return nil, payloadError("encoding the Xero contact: %v", err)
	}
	return body, nil
}

// prepareSupplier is what PushSupplier settles before any call.
func (x *Xero) prepareSupplier(conn Connection, cred credential.Credential, cmd SupplierPush) (XeroConnectionConfig, []byte, string, error) {
	return x.prepare(conn, cred, cmd.IdempotencyKey, func(XeroConnectionConfig) ([]byte, error) { return xeroContactRequest(cmd) })
}

// CheckSupplier returns the error PushSupplier would return before any
// call (provider.SupplierChecker).
func (x *Xero) CheckSupplier(conn Connection, cred credential.Credential, cmd SupplierPush) error {
	_, _, _, err := x.prepareSupplier(conn, cred, cmd)
	return err
}

// PushSupplier creates the supplier as a Xero contact, or updates the
// contact an earlier push created or linked (cmd.Document). When Xero
// refuses a new contact because another already has its name, it finds
// that contact (by ContactNumber, the host's supplier code, then by name)
// and links the supplier to it. Every failure is an *Error whose text never
// contains a value of cred.
func (x *Xero) PushSupplier(ctx context.Context, conn Connection, cred credential.Credential, cmd SupplierPush) (Result, error) {
	cfg, body, auth, err := x.prepareSupplier(conn, cred, cmd)
	if err != nil {
		return Result{}, err
	}
	// POST /Contacts creates a contact, or updates the one whose ContactID
	// the body names; summarizeErrors=false answers a refused contact in a
	// 200 with its validation errors.
	target := *cfg.APIBaseURL
	target.Path += "/Contacts"
	target.RawQuery = url.Values{"summarizeErrors": {"false"}}.Encode()
	h := cfg.header(auth)
	h.Set("Idempotency-Key", XeroIdempotencyKey(cmd.IdempotencyKey))
	h.Set("Content-Type", "application/json")
	a, err := x.c.do(ctx, http.MethodPost, &target, "apiBaseUrl", h, body, cred)
	if err != nil {
		return Result{}, err
	}
	res, dup, err := x.interpretContact(a, cmd, cred)
	if !dup {
		return res, err
	}
	if cmd.Document != nil {
		// A rename onto another contact's name: linking would move the
		// supplier's orders to that contact, so a person decides.
		return Result{}, redactError(&Error{Kind: Rejected, StatusCode: a.status, Message: fmt.Sprintf(
			"xero refused to rename contact %s to %s: another contact has that name (rename one of them, or merge them in Xero)",
			cmd.Document.ID, quoteBody([]byte(cmd.Supplier.Name), cred))}, cred)
	}
	return x.link(ctx, cfg, auth, cmd.Supplier, cred)
}

// xeroDuplicateName is what Xero's validation message says when a contact
// of that name already exists: "The contact name … is already assigned to
// another contact." Xero gives the refusal no code, so its text is the only
// sign.
const xeroDuplicateName = "already assigned to another contact"

// interpretContact maps Xero's answer to a contact push to a Result or an
// *Error; dup reports a refusal because another contact has the name
// (err then says so, for a caller that does not link).
func (x *Xero) interpretContact(a answer, cmd SupplierPush, cred credential.Credential) (res Result, dup bool, err error) {
	ans := decodeXeroAnswer(a.body)
	if a.status < 200 || a.status >= 300 {
		e := x.failure(a, ans, cred)
		return Result{}, a.status == http.StatusBadRequest && isDuplicateName(ans.Elements), e
	}
	if len(ans.Contacts) == 0 {
		// Xero took the call but we cannot tell what it did: a retry with
		// the same Idempotency-Key gets the same answer.
		return Result{}, false, redactError(&Error{Kind: Retryable, StatusCode: a.status,
			Message: fmt.Sprintf("xero answered %d without a contact: %s", a.status, quoteBody(a.body, cred))}, cred)
	}
	c := ans.Contacts[0]
	if refused, msgs := c.refused(); refused {
		return Result{}, isDuplicateName(ans.Contacts[:1]), redactError(&Error{Kind: Rejected, StatusCode: a.status,
			Message: "xero refused the contact: " + quoteBody([]byte(strings.Join(msgs, "; ")), cred)}, cred)
	}
	if !isGUID(c.ContactID) {
		return Result{}, false, redactError(&Error{Kind: Retryable, StatusCode: a.status,
			Message: "xero answered a ContactID that is not a GUID: " + quoteBody([]byte(c.ContactID), cred)}, cred)
	}
	action := SupplierCreated
	if cmd.Document != nil {
		action = SupplierUpdated
	}
	return Result{Status: StatusCompleted, ExternalID: c.ContactID, StatusCode: a.status,
		Document: &Document{ID: c.ContactID}, Action: action}, false, nil
}

// isDuplicateName reports whether a refused element says that its name is
// another contact's.
func isDuplicateName(els []xeroElement) bool {
	for _, el := range els {
		for _, v := range el.ValidationErrors {
			if strings.Contains(strings.ToLower(v.Message), xeroDuplicateName) {
				return true
			}
		}
	}
	return false
}

// link finds the contact that already has the supplier's name and answers
// it as the supplier's: first by ContactNumber (the host's supplier code,
// which an earlier push may have set), then by name. None found is a
// permanent refusal that says so.
func (x *Xero) link(ctx context.Context, cfg XeroConnectionConfig, auth string, s Supplier, cred credential.Credential) (Result, error) {
	var lookups []struct{ field, value string }
	if s.Code != "" {
		lookups = append(lookups, struct{ field, value string }{"ContactNumber", s.Code})
	}
	lookups = append(lookups, struct{ field, value string }{"Name", s.Name})
	for _, l := range lookups {
		target := *cfg.APIBaseURL
		target.Path += "/Contacts"
		target.RawQuery = url.Values{"where": {xeroWhereEquals(l.field, l.value)}}.Encode()
		a, err := x.c.do(ctx, http.MethodGet, &target, "apiBaseUrl", cfg.header(auth), nil, cred)
		if err != nil {
			return Result{}, err
		}
		ans := decodeXeroAnswer(a.body)
		if a.status < 200 || a.status >= 300 {
			e := x.failure(a, ans, cred)
			e.Message = "finding the contact named like the supplier: " + e.Message
			return Result{}, e
		}
		// The filter is Xero's; the comparison is ours too, so that a
		// filter Xero read otherwise cannot link another contact.
		for _, c := range ans.Contacts {
			got := c.Name
			if l.field == "ContactNumber" {
				got = c.ContactNumber
			}
			if isGUID(c.ContactID) && strings.EqualFold(strings.TrimSpace(got), l.value) {
				return Result{Status: StatusCompleted, ExternalID: c.ContactID, StatusCode: a.status,
					Document: &Document{ID: c.ContactID}, Action: SupplierLinked}, nil
			}
		}
	}
	return Result{}, redactError(&Error{Kind: Rejected, Message: fmt.Sprintf(
		"xero refused the contact because another has the name %s, and no active contact of that name%s was found to link to",
		quoteBody([]byte(s.Name), cred), codeClause(s.Code, cred))}, cred)
}

func codeClause(code string, cred credential.Credential) string {
	if code == "" {
		return ""
	}
	return " or ContactNumber " + quoteBody([]byte(code), cred)
}

// xeroWhereEquals returns Xero's where filter field=="value": the value in
// double quotes, a double quote inside it doubled, as the filter's string
// literals escape it.
func xeroWhereEquals(field, value string) string {
	return field + `=="` + strings.ReplaceAll(value, `"`, `""`) + `"`
}
