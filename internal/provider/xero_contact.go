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

// xeroSupplierLimits are Xero's names and lengths of a contact's fields.
var xeroSupplierLimits = supplierLimits{name: fieldLabel{"Xero's contact Name", 255}, code: fieldLabel{"Xero's ContactNumber", 50},
	email: fieldLabel{"Xero's EmailAddress", 255}, taxNumber: fieldLabel{"Xero's TaxNumber", 50}, phone: fieldLabel{"Xero's PhoneNumber", 50},
	city: fieldLabel{"Xero's address City", 255}, postalCode: fieldLabel{"Xero's address PostalCode", 50},
	country: fieldLabel{"Xero's address Country", 50}, addressLine: fieldLabel{"Xero's AddressLine%d", 500},
	addressLines: "Xero's address has 4"}

// xeroContactRequest builds the request body of cmd: a new contact, or an
// update of the one an earlier push created or linked (cmd.Document).
func xeroContactRequest(cmd SupplierPush) ([]byte, error) {
	s := cmd.Supplier
	if err := xeroSupplierLimits.check(s); err != nil {
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
	if s.hasAddress() {
		// POBOX is the contact's postal address: the one Xero prints on the
		// purchase orders sent to the supplier.
		a := xeroAddress{AddressType: "POBOX", City: s.City, PostalCode: s.PostalCode, Country: s.Country}
		s.setLines(&a.AddressLine1, &a.AddressLine2, &a.AddressLine3, &a.AddressLine4)
		c.Addresses = []xeroAddress{a}
	}
	body, err := json.Marshal(xeroContacts{Contacts: []xeroContactBody{c}})
	if err != nil {
		return nil, payloadError("encoding the Xero contact: %v", err)
	}
	return body, nil
}

func (xeroLedger) supplierBody(_ XeroConnectionConfig, cmd SupplierPush) ([]byte, error) {
	return xeroContactRequest(cmd)
}

// sendSupplier creates the supplier as a Xero contact, or updates the
// contact an earlier push created or linked (cmd.Document).
func (x xeroLedger) sendSupplier(ctx context.Context, p prepared[XeroConnectionConfig], cmd SupplierPush, cred credential.Credential) supplierWrite {
	// POST /Contacts creates a contact, or updates the one whose ContactID
	// the body names; summarizeErrors=false answers a refused contact in a
	// 200 with its validation errors.
	target := *p.cfg.APIBaseURL
	target.Path += "/Contacts"
	target.RawQuery = url.Values{"summarizeErrors": {"false"}}.Encode()
	a, err := x.c.do(ctx, http.MethodPost, &target, "apiBaseUrl", x.writeHeader(p, cmd.IdempotencyKey), p.body, cred)
	if err != nil {
		return supplierWrite{err: err}
	}
	return x.interpretContact(a, cred)
}

// renameRefused: an update onto another contact's name.
func (xeroLedger) renameRefused(cmd SupplierPush, _ supplierWrite, cred credential.Credential) *Error {
	return &Error{Message: fmt.Sprintf("xero refused to rename contact %s to %s: another contact has that name "+
		"(rename one of them, or merge them in Xero)", cmd.Document.ID, quoteBody([]byte(cmd.Supplier.Name), cred))}
}

// xeroDuplicateName is what Xero's validation message says when a contact
// of that name already exists: "The contact name … is already assigned to
// another contact." Xero gives the refusal no code, so its text is the only
// sign.
const xeroDuplicateName = "already assigned to another contact"

// interpretContact maps Xero's answer to a contact push to a Result or an
// *Error, and says whether Xero refused it because another contact has
// the name.
func (x xeroLedger) interpretContact(a answer, cred credential.Credential) supplierWrite {
	ans := decodeXeroAnswer(a.body)
	if a.status < 200 || a.status >= 300 {
		return supplierWrite{err: x.failure(a, ans, cred), taken: a.status == http.StatusBadRequest && isDuplicateName(ans.Elements)}
	}
	if len(ans.Contacts) == 0 {
		// Xero took the call but we cannot tell what it did: a retry with
		// the same Idempotency-Key gets the same answer.
		return supplierWrite{err: redactError(&Error{Kind: Retryable, StatusCode: a.status,
			Message: fmt.Sprintf("xero answered %d without a contact: %s", a.status, quoteBody(a.body, cred))}, cred)}
	}
	c := ans.Contacts[0]
	if refused, msgs := c.refused(); refused {
		return supplierWrite{taken: isDuplicateName(ans.Contacts[:1]), err: redactError(&Error{Kind: Rejected, StatusCode: a.status,
			Message: "xero refused the contact: " + quoteBody([]byte(strings.Join(msgs, "; ")), cred)}, cred)}
	}
	if !isGUID(c.ContactID) {
		return supplierWrite{err: redactError(&Error{Kind: Retryable, StatusCode: a.status,
			Message: "xero answered a ContactID that is not a GUID: " + quoteBody([]byte(c.ContactID), cred)}, cred)}
	}
	return supplierWrite{res: remembered(a.status, c.ContactID, "", "")}
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
func (x xeroLedger) link(ctx context.Context, p prepared[XeroConnectionConfig], s Supplier, cred credential.Credential) (Result, error) {
	cfg, auth := p.cfg, p.auth
	var lookups []struct{ field, value string }
	if s.Code != "" {
		lookups = append(lookups, struct{ field, value string }{"ContactNumber", s.Code})
	}
	lookups = append(lookups, struct{ field, value string }{"Name", s.Name})
	for _, l := range lookups {
		target := *cfg.APIBaseURL
		target.Path += "/Contacts"
		target.RawQuery = url.Values{"where": {xeroWhereEquals(l.field, l.value)}}.Encode()
		a, err := x.c.do(ctx, http.MethodGet, &target, "apiBaseUrl", x.header(cfg, auth), nil, cred)
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
				return remembered(a.status, c.ContactID, "", SupplierLinked), nil
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
