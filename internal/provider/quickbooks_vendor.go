package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"integration-outbox/internal/credential"
)

// quickBooksDuplicateName is QuickBooks Online's fault code for a name
// another vendor, customer or employee already has ("Duplicate Name Exists
// Error"): DisplayName is unique across the three.
const quickBooksDuplicateName = "6240"

// quickBooksMaxCompanyName is the most characters a vendor's CompanyName
// takes; a longer supplier name is sent as DisplayName only.
const quickBooksMaxCompanyName = 100

// QuickBooks Online's vendor as we send it, in its field names
// (a Vendor of Intuit's data model: internal/testenv/qboschema). Only the fields the host gave
// are sent: on a sparse update, a field the host left empty keeps its value.
type (
	qboVendor struct {
		ID               string      `json:"Id,omitempty"`
		SyncToken        string      `json:"SyncToken,omitempty"`
		Sparse           bool        `json:"sparse,omitempty"`
		DisplayName      string      `json:"DisplayName"`
		CompanyName      string      `json:"CompanyName,omitempty"`
		PrimaryEmailAddr *qboEmail   `json:"PrimaryEmailAddr,omitempty"`
		PrimaryPhone     *qboPhone   `json:"PrimaryPhone,omitempty"`
		BillAddr         *qboAddress `json:"BillAddr,omitempty"`
		TaxIdentifier    string      `json:"TaxIdentifier,omitempty"`
		CurrencyRef      *qboRef     `json:"CurrencyRef,omitempty"`
		AcctNum          string      `json:"AcctNum,omitempty"`
	}
	qboEmail struct {
		Address string `json:"Address"`
	}
	qboPhone struct {
		FreeFormNumber string `json:"FreeFormNumber"`
	}
	qboAddress struct {
		Line1      string `json:"Line1,omitempty"`
		Line2      string `json:"Line2,omitempty"`
		Line3      string `json:"Line3,omitempty"`
		Line4      string `json:"Line4,omitempty"`
		City       string `json:"City,omitempty"`
		PostalCode string `json:"PostalCode,omitempty"`
		Country    string `json:"Country,omitempty"`
	}
)

// quickBooksVendorBody builds the request body of supplier s; doc, when
// set, makes it a sparse update of that vendor. The currency is sent on a
// create only: QuickBooks does not change a vendor's currency.
func quickBooksVendorBody(s Supplier, doc *Document) ([]byte, error) {
	if strings.TrimSpace(s.Name) == "" {
		return nil, payloadError("payload_json.name: missing or empty")
	}
	limits := []fieldLimit{
		{"name", s.Name, "QuickBooks' vendor DisplayName", 500},
		{"code", s.Code, "QuickBooks' vendor AcctNum", 100},
		{"email", s.Email, "QuickBooks' PrimaryEmailAddr", 100},
		{"taxNumber", s.TaxNumber, "QuickBooks' vendor TaxIdentifier", 20},
		{"phone", s.Phone, "QuickBooks' PrimaryPhone", 30},
		{"city", s.City, "QuickBooks' BillAddr City", 255},
		{"postalCode", s.PostalCode, "QuickBooks' BillAddr PostalCode", 30},
		{"country", s.Country, "QuickBooks' BillAddr Country", 255},
	}
	if len(s.AddressLines) > 4 {
		return nil, payloadError("payload_json.addressLines: %d lines; at most 4 are sent", len(s.AddressLines))
	}
	for i, l := range s.AddressLines {
		limits = append(limits, fieldLimit{fmt.Sprintf("addressLines[%d]", i), l, fmt.Sprintf("QuickBooks' BillAddr Line%d", i+1), 500})
	}
	if err := checkLengths(limits); err != nil {
		return nil, err
	}
	if err := supplierCurrency(s.CurrencyCode); err != nil {
		return nil, err
	}
	v := qboVendor{DisplayName: s.Name, TaxIdentifier: s.TaxNumber, AcctNum: s.Code}
	if utf8.RuneCountInString(s.Name) <= quickBooksMaxCompanyName {
		v.CompanyName = s.Name
	}
	if s.Email != "" {
		v.PrimaryEmailAddr = &qboEmail{Address: s.Email}
	}
	if s.Phone != "" {
		v.PrimaryPhone = &qboPhone{FreeFormNumber: s.Phone}
	}
	if len(s.AddressLines) > 0 || s.City != "" || s.PostalCode != "" || s.Country != "" {
		a := &qboAddress{City: s.City, PostalCode: s.PostalCode, Country: s.Country}
		for i, l := range s.AddressLines {
			*[]*string{&a.Line1, &a.Line2, &a.Line3, &a.Line4}[i] = l
		}
		v.BillAddr = a
	}
	if doc != nil {
		v.ID, v.SyncToken, v.Sparse = doc.ID, doc.SyncToken, true
	} else if s.CurrencyCode != "" {
		v.CurrencyRef = &qboRef{s.CurrencyCode}
	}
	body, err := json.Marshal(v)
	if err != nil {
		return nil, payloadError("encoding the QuickBooks vendor: %v", err)
	}
	return body, nil
}

// prepareSupplier is what PushSupplier settles before any call; a
// remembered vendor without a SyncToken cannot be updated.
func (q *QuickBooks) prepareSupplier(conn Connection, cred credential.Credential, cmd SupplierPush) (QuickBooksConnectionConfig, []byte, string, error) {
	return q.prepare(conn, cred, cmd.IdempotencyKey, func(QuickBooksConnectionConfig) ([]byte, error) {
		if cmd.Document != nil && (cmd.Document.ID == "" || cmd.Document.SyncToken == "") {
			return nil, payloadError("the supplier's remembered vendor %q has no SyncToken to update it with", cmd.Document.ID)
		}
		return quickBooksVendorBody(cmd.Supplier, cmd.Document)
	})
}

// CheckSupplier returns the error PushSupplier would return before any
// call (provider.SupplierChecker).
func (q *QuickBooks) CheckSupplier(conn Connection, cred credential.Credential, cmd SupplierPush) error {
	_, _, _, err := q.prepareSupplier(conn, cred, cmd)
	return err
}

// PushSupplier creates the supplier as a QuickBooks Online vendor, or
// updates the vendor an earlier push created or linked (cmd.Document) with
// a sparse update, reading its current SyncToken once when that is stale.
// When QuickBooks refuses a new vendor because the name is taken (6240), it
// finds the vendor of that DisplayName and links the supplier to it. Every
// failure is an *Error whose text never contains a value of cred.
func (q *QuickBooks) PushSupplier(ctx context.Context, conn Connection, cred credential.Credential, cmd SupplierPush) (Result, error) {
	cfg, body, auth, err := q.prepareSupplier(conn, cred, cmd)
	if err != nil {
		return Result{}, err
	}
	res, ans, err := q.write(ctx, cfg, auth, qboVendorEntity, cmd.IdempotencyKey, cmd.Document, body,
		func(doc *Document) ([]byte, error) { return quickBooksVendorBody(cmd.Supplier, doc) }, cred)
	switch {
	case err == nil:
		res.Action = SupplierCreated
		if cmd.Document != nil {
			res.Action = SupplierUpdated
		}
		return res, nil
	case !ans.hasCode(quickBooksDuplicateName):
		return res, err
	case cmd.Document != nil:
		// A rename onto a name another vendor, customer or employee has:
		// linking would move the supplier's orders, so a person decides.
		return Result{}, redactError(&Error{Kind: Rejected, StatusCode: errorStatus(err), Message: fmt.Sprintf(
			"quickbooks refused to rename vendor %s to %s: another vendor, customer or employee has that name (%s)",
			cmd.Document.ID, quoteBody([]byte(cmd.Supplier.Name), cred), ans.faultText())}, cred)
	}
	return q.link(ctx, cfg, auth, cmd.Supplier, cred)
}

// errorStatus is the HTTP status of a provider error, 0 when it has none.
func errorStatus(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}

// link finds the active vendor whose DisplayName is the supplier's name and
// answers it as the supplier's. None found (the name may be a customer's
// or an employee's) is a permanent refusal that says so.
func (q *QuickBooks) link(ctx context.Context, cfg QuickBooksConnectionConfig, auth string, s Supplier, cred credential.Credential) (Result, error) {
	query := "select * from Vendor where DisplayName = " + quickBooksQuote(s.Name)
	a, err := q.c.do(ctx, http.MethodGet, cfg.url("query", url.Values{"query": {query}}), "apiBaseUrl", q.header(auth), nil, cred)
	if err != nil {
		return Result{}, err
	}
	ans := decodeQBOAnswer(a.body)
	if err := q.failure(a, ans, cred); err != nil {
		err.Message = "finding the vendor of the supplier's name: " + err.Message
		return Result{}, err
	}
	if ans.QueryResponse != nil {
		// The query is QuickBooks'; the comparison is ours too, so that a
		// query read otherwise cannot link another vendor.
		for _, v := range ans.QueryResponse.Vendor {
			if v.ID != "" && len(v.ID) <= maxExternalIDBytes && strings.EqualFold(strings.TrimSpace(v.DisplayName), s.Name) {
				return Result{Status: StatusCompleted, ExternalID: v.ID, StatusCode: a.status,
					Document: &Document{ID: v.ID, SyncToken: v.SyncToken}, Action: SupplierLinked}, nil
			}
		}
	}
	return Result{}, redactError(&Error{Kind: Rejected, StatusCode: a.status, Message: fmt.Sprintf(
		"quickbooks refused the vendor because the name %s is taken, and no active vendor of that name was found to link to "+
			"(a customer or an employee may have it: rename one of them)", quoteBody([]byte(s.Name), cred))}, cred)
}

// quickBooksQuote returns s as a string literal of QuickBooks' query
// language: in single quotes, a single quote inside it escaped with a
// backslash, as QuickBooks documents.
func quickBooksQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `\'`) + "'"
}
