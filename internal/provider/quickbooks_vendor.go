package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// quickBooksSupplierLimits are QuickBooks' names and lengths of a vendor's
// fields.
var quickBooksSupplierLimits = supplierLimits{name: fieldLabel{"QuickBooks' vendor DisplayName", 500},
	code: fieldLabel{"QuickBooks' vendor AcctNum", 100}, email: fieldLabel{"QuickBooks' PrimaryEmailAddr", 100},
	taxNumber: fieldLabel{"QuickBooks' vendor TaxIdentifier", 20}, phone: fieldLabel{"QuickBooks' PrimaryPhone", 30},
	city: fieldLabel{"QuickBooks' BillAddr City", 255}, postalCode: fieldLabel{"QuickBooks' BillAddr PostalCode", 30},
	country: fieldLabel{"QuickBooks' BillAddr Country", 255}, addressLine: fieldLabel{"QuickBooks' BillAddr Line%d", 500},
	addressLines: "at most 4 are sent"}

// quickBooksVendorBody builds the request body of supplier s; doc, when
// set, makes it a sparse update of that vendor. The currency is sent on a
// create only: QuickBooks does not change a vendor's currency.
func quickBooksVendorBody(s Supplier, doc *Document) ([]byte, error) {
	if err := quickBooksSupplierLimits.check(s); err != nil {
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
	if s.hasAddress() {
		a := &qboAddress{City: s.City, PostalCode: s.PostalCode, Country: s.Country}
		s.setLines(&a.Line1, &a.Line2, &a.Line3, &a.Line4)
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

// supplierBody is the vendor's body; a remembered vendor without a
// SyncToken cannot be updated.
func (qboLedger) supplierBody(_ QuickBooksConnectionConfig, cmd SupplierPush) ([]byte, error) {
	if cmd.Document != nil && (cmd.Document.ID == "" || cmd.Document.SyncToken == "") {
		return nil, payloadError("the supplier's remembered vendor %q has no SyncToken to update it with", cmd.Document.ID)
	}
	return quickBooksVendorBody(cmd.Supplier, cmd.Document)
}

// sendSupplier creates the supplier as a QuickBooks Online vendor, or
// updates the vendor an earlier push created or linked (cmd.Document) with
// a sparse update, reading its current SyncToken once when that is stale.
// 6240 says the name is taken.
func (q qboLedger) sendSupplier(ctx context.Context, p prepared[QuickBooksConnectionConfig], cmd SupplierPush, cred credential.Credential) supplierWrite {
	res, ans, err := q.write(ctx, p, qboVendorEntity, cmd.IdempotencyKey, cmd.Document,
		func(doc *Document) ([]byte, error) { return quickBooksVendorBody(cmd.Supplier, doc) }, cred)
	return supplierWrite{res: res, err: err, taken: ans.hasCode(quickBooksDuplicateName), detail: ans.faultText()}
}

// renameRefused: an update onto a name another vendor, customer or
// employee has.
func (qboLedger) renameRefused(cmd SupplierPush, w supplierWrite, cred credential.Credential) *Error {
	return &Error{Message: fmt.Sprintf("quickbooks refused to rename vendor %s to %s: another vendor, customer or employee has that name (%s)",
		cmd.Document.ID, quoteBody([]byte(cmd.Supplier.Name), cred), w.detail)}
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
func (q qboLedger) link(ctx context.Context, p prepared[QuickBooksConnectionConfig], s Supplier, cred credential.Credential) (Result, error) {
	a, ans, err := q.query(ctx, p, "select * from Vendor where DisplayName = "+quickBooksQuote(s.Name),
		"finding the vendor of the supplier's name", cred)
	if err != nil {
		return Result{}, err
	}
	if ans.QueryResponse != nil {
		// The query is QuickBooks'; the comparison is ours too, so that a
		// query read otherwise cannot link another vendor.
		for _, v := range ans.QueryResponse.Vendor {
			if v.ID != "" && len(v.ID) <= maxExternalIDBytes && strings.EqualFold(strings.TrimSpace(v.DisplayName), s.Name) {
				return remembered(a.status, v.ID, v.SyncToken, SupplierLinked), nil
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
