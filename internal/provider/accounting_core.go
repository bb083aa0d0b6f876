package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"integration-outbox/internal/credential"
)

// The core every accounting provider (xero, quickbooks) pushes through. A
// provider is its configuration (a Parse…Config), its request bodies and
// its reading of the answers; what is the same for all of them is written
// here once: what a push settles before any call (prepare), the headers of
// every call (header), the HTTP call with its timeout, pacing headers,
// Retry-After and the classification of transport errors and statuses
// (accountingClient.do, accounting_http.go), the remembered document of a
// result (remembered), and the supplier flow, a create refused for its name
// linking the record that has the name (pushSupplier).
// docs/adding-a-provider.md walks through a third provider.

// prepared is what a push settled before any call: the connection's
// config, the request body and the Authorization value.
type prepared[C any] struct {
	cfg  C
	body []byte
	auth string
}

// prepare settles a push before any call: the connection's config (parse,
// which names the bad field), the idempotency key, the request body made
// from the config, and the bearer token. Each error is the *Error the push
// ends with, no call made.
func prepare[C any](c accountingClient, conn Connection, cred credential.Credential, key string,
	parse func(json.RawMessage, bool) (C, error), body func(C) ([]byte, error)) (prepared[C], error) {
	var (
		p   prepared[C]
		err error
	)
	if p.cfg, err = parse(conn.Config, c.cfg.AllowPrivateNetworks); err != nil {
		return p, err
	}
	if key == "" {
		return p, payloadError("idempotency_key: missing or empty")
	}
	if p.body, err = body(p.cfg); err != nil {
		return p, err
	}
	p.auth, err = bearer(c.name, cred)
	return p, err
}

// header returns the headers of every call of the provider: the
// Authorization value auth, JSON answers, our User-Agent.
func (c accountingClient) header(auth string) http.Header {
	h := http.Header{}
	h.Set("Authorization", auth)
	h.Set("Accept", "application/json")
	h.Set("User-Agent", "integration-outbox-"+c.name+"/1")
	return h
}

// jsonHeader is header for a call that sends a JSON body.
func (c accountingClient) jsonHeader(auth string) http.Header {
	h := c.header(auth)
	h.Set("Content-Type", "application/json")
	return h
}

// remembered is the result of a record the provider answered with: its id
// becomes the row's provider_reference and, with its SyncToken where the
// provider has one, the document remembered for the next push of the same
// entity (an update rather than a second create).
func remembered(status int, id, syncToken, action string) Result {
	return Result{Status: StatusCompleted, ExternalID: id, StatusCode: status,
		Document: &Document{ID: id, SyncToken: syncToken}, Action: action}
}

// supplierWrite is the answer to a supplier's create or update: the
// result, or err and whether the provider refused it because another of its
// records has the name (taken).
type supplierWrite struct {
	res   Result
	taken bool
	err   error
	// detail is the provider's own words on a refusal, for renameRefused.
	detail string
}

// pushSupplier is the supplier flow of every accounting provider: write
// creates the record, or updates the one cmd.Document names; a create
// refused because the name is taken links the supplier to the record of
// that name (link); an update refused so is a person's decision, since
// linking would move the supplier's orders (renameRefused says so).
func pushSupplier(cmd SupplierPush, w supplierWrite, link func() (Result, error),
	renameRefused func() *Error, cred credential.Credential) (Result, error) {
	switch {
	case w.err == nil:
		w.res.Action = SupplierCreated
		if cmd.Document != nil {
			w.res.Action = SupplierUpdated
		}
		return w.res, nil
	case !w.taken:
		return w.res, w.err
	case cmd.Document != nil:
		e := renameRefused()
		e.Kind, e.StatusCode = Rejected, errorStatus(w.err)
		return Result{}, redactError(e, cred)
	}
	return link()
}

// supplierLimits are what a provider calls a supplier's fields and how
// long each may be; addressLine's label takes the line's number.
type supplierLimits struct {
	name, code, email, taxNumber, phone, city, postalCode, country, addressLine fieldLabel
	// addressLines is what the refusal of a fifth address line says.
	addressLines string
}

// fieldLabel is a field's name in the provider and its length limit.
type fieldLabel struct {
	label string
	max   int
}

// check refuses, naming the payload field, what the provider can never
// take: no name, a field longer than its limit, more than four address
// lines, an unknown currency.
func (l supplierLimits) check(s Supplier) error {
	if strings.TrimSpace(s.Name) == "" {
		return payloadError("payload_json.name: missing or empty")
	}
	limits := []fieldLimit{
		{"name", s.Name, l.name.label, l.name.max},
		{"code", s.Code, l.code.label, l.code.max},
		{"email", s.Email, l.email.label, l.email.max},
		{"taxNumber", s.TaxNumber, l.taxNumber.label, l.taxNumber.max},
		{"phone", s.Phone, l.phone.label, l.phone.max},
		{"city", s.City, l.city.label, l.city.max},
		{"postalCode", s.PostalCode, l.postalCode.label, l.postalCode.max},
		{"country", s.Country, l.country.label, l.country.max},
	}
	if len(s.AddressLines) > 4 {
		return payloadError("payload_json.addressLines: %d lines; %s", len(s.AddressLines), l.addressLines)
	}
	for i, line := range s.AddressLines {
		limits = append(limits, fieldLimit{fmt.Sprintf("addressLines[%d]", i), line, fmt.Sprintf(l.addressLine.label, i+1), l.addressLine.max})
	}
	if err := checkLengths(limits); err != nil {
		return err
	}
	return supplierCurrency(s.CurrencyCode)
}

// hasAddress reports whether the host gave any part of the supplier's
// address.
func (s Supplier) hasAddress() bool {
	return len(s.AddressLines) > 0 || s.City != "" || s.PostalCode != "" || s.Country != ""
}

// setLines puts the supplier's address lines into the provider's four
// line fields, in order.
func (s Supplier) setLines(fields ...*string) {
	for i, l := range s.AddressLines {
		*fields[i] = l
	}
}

// ledger is what one accounting provider is: its configuration, its
// request bodies, its calls and its reading of the answers. accounting
// does the rest.
type ledger[C any] interface {
	// config reads a connection's config_json; every error is
	// ConfigInvalid and names the field.
	config(raw json.RawMessage, allowPrivate bool) (C, error)
	// orderBody is the request body of a purchase order push: a create, or
	// an update of cmd.Document. An error is PayloadInvalid, naming the field.
	orderBody(cfg C, cmd PurchaseOrderPush) ([]byte, error)
	// sendOrder makes the calls of a prepared purchase order push and
	// reads the answers.
	sendOrder(ctx context.Context, p prepared[C], cmd PurchaseOrderPush, cred credential.Credential) (Result, error)
	// supplierBody is the request body of a supplier push.
	supplierBody(cfg C, cmd SupplierPush) ([]byte, error)
	// sendSupplier makes the calls of a prepared supplier push: a create,
	// or an update of cmd.Document.
	sendSupplier(ctx context.Context, p prepared[C], cmd SupplierPush, cred credential.Credential) supplierWrite
	// link finds the record that has the supplier's name, after a create
	// was refused because the name is taken; none found is Rejected.
	link(ctx context.Context, p prepared[C], s Supplier, cred credential.Credential) (Result, error)
	// renameRefused says why an update onto a taken name is not linked.
	renameRefused(cmd SupplierPush, w supplierWrite, cred credential.Credential) *Error
	// replayWindow is how long the connection's provider is trusted to
	// replay a repeated key (config_json.replayWindowSeconds).
	replayWindow(cfg C) time.Duration
	// findOrders looks for the purchase orders an earlier create of cmd
	// may have made, by what the create sent (its number, its supplier):
	// those that match, without guessing.
	findOrders(ctx context.Context, p prepared[C], cmd PurchaseOrderPush, cred credential.Credential) (lookup, error)
}

// lookup is what a look-up found: the matching documents, the status of
// the answer, and what was looked for, in words.
type lookup struct {
	status int
	docs   []found
	what   string
}

// accounting is an accounting provider: the core around its ledger. It
// is a PurchaseOrderPusher and a SupplierPusher, checks both before any
// call, and is Limited. It is safe for concurrent use.
type accounting[C any, L ledger[C]] struct {
	c accountingClient
	l L
}

// newAccounting returns the provider name on cfg, its ledger made by
// ledger on the provider's client.
func newAccounting[C any, L ledger[C]](name string, cfg AccountingConfig, ledger func(accountingClient) L) accounting[C, L] {
	c := newAccountingClient(name, cfg)
	return accounting[C, L]{c: c, l: ledger(c)}
}

// Name is the provider's name.
func (a *accounting[C, L]) Name() string { return a.c.name }

// CloseIdleConnections closes the client's idle keep-alive connections.
func (a *accounting[C, L]) CloseIdleConnections() { a.c.client.CloseIdleConnections() }

// Limits returns the limits of a connection through the provider.
func (a *accounting[C, L]) Limits(conn Connection) Limits { return limitsOf(a.c.name, conn) }

// settle is prepare for the connection with body, the command's.
func (a *accounting[C, L]) settle(conn Connection, cred credential.Credential, key string, body func(C) ([]byte, error)) (prepared[C], error) {
	return prepare(a.c, conn, cred, key, a.l.config, body)
}

// CheckPurchaseOrder returns the error PushPurchaseOrder would return
// before any call (provider.PurchaseOrderChecker).
func (a *accounting[C, L]) CheckPurchaseOrder(conn Connection, cred credential.Credential, cmd PurchaseOrderPush) error {
	_, err := a.settle(conn, cred, cmd.IdempotencyKey, func(cfg C) ([]byte, error) { return a.l.orderBody(cfg, cmd) })
	return err
}

// PushPurchaseOrder creates the order in the ledger, or updates the
// purchase order an earlier push created (cmd.Document). A create whose
// earlier attempt's outcome is unknown looks the order up first once the
// provider's replay of the key may have lapsed (lookUpFirst): found, the
// row completes with it (ActionReconciled), no create. Every failure is
// an *Error whose text never contains a value of cred; a create's that may
// have made the order is OutcomeUnknown.
func (a *accounting[C, L]) PushPurchaseOrder(ctx context.Context, conn Connection, cred credential.Credential, cmd PurchaseOrderPush) (Result, error) {
	p, err := a.settle(conn, cred, cmd.IdempotencyKey, func(cfg C) ([]byte, error) { return a.l.orderBody(cfg, cmd) })
	if err != nil {
		return Result{}, err
	}
	if cmd.Document != nil {
		return a.l.sendOrder(ctx, p, cmd, cred)
	}
	if lookUpFirst(cmd.Unknown, a.l.replayWindow(p.cfg), a.c.cfg.Clock()) {
		l, err := a.l.findOrders(ctx, p, cmd, cred)
		if err != nil {
			var perr *Error
			if errors.As(err, &perr) {
				perr.OutcomeUnknown = true
				perr.Message = "looking up the purchase order an earlier attempt may have created, before creating it again: " + perr.Message
			}
			return Result{}, err
		}
		if res, err := reconciled(a.c.name, l.what, l.status, l.docs, cred); err != nil || res.Status != "" {
			return res, err
		}
		// None: the create is a call of its own, paced as any.
		if err := nextCall(ctx); err != nil {
			return Result{}, err
		}
	}
	res, err := a.l.sendOrder(ctx, p, cmd, cred)
	return res, unknownOutcome(err)
}

// CheckSupplier returns the error PushSupplier would return before any
// call (provider.SupplierChecker).
func (a *accounting[C, L]) CheckSupplier(conn Connection, cred credential.Credential, cmd SupplierPush) error {
	_, err := a.settle(conn, cred, cmd.IdempotencyKey, func(cfg C) ([]byte, error) { return a.l.supplierBody(cfg, cmd) })
	return err
}

// PushSupplier creates the supplier in the ledger, or updates the record
// an earlier push created or linked (cmd.Document); a create refused
// because the name is taken links the record of that name (pushSupplier).
// Every failure is an *Error whose text never contains a value of cred.
func (a *accounting[C, L]) PushSupplier(ctx context.Context, conn Connection, cred credential.Credential, cmd SupplierPush) (Result, error) {
	p, err := a.settle(conn, cred, cmd.IdempotencyKey, func(cfg C) ([]byte, error) { return a.l.supplierBody(cfg, cmd) })
	if err != nil {
		return Result{}, err
	}
	w := a.l.sendSupplier(ctx, p, cmd, cred)
	return pushSupplier(cmd, w, func() (Result, error) { return a.l.link(ctx, p, cmd.Supplier, cred) },
		func() *Error { return a.l.renameRefused(cmd, w, cred) }, cred)
}
