package provider

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"integration-outbox/internal/credential"
)

// Xero defaults (config_json apiBaseUrl, tokenUrl, status).
const (
	DefaultXeroAPIBaseURL = "https://api.xero.com/api.xro/2.0"
	DefaultXeroTokenURL   = "https://identity.xero.com/connect/token"
	defaultXeroStatus     = "SUBMITTED"
)

// xeroMaxIdempotencyKey is the longest Idempotency-Key Xero takes.
const xeroMaxIdempotencyKey = 128

// Xero is the "xero" provider: it creates a purchase order in the
// connection's Xero organisation (its tenant) and, on a later push of the
// same order, updates that purchase order (docs/providers.md). It is safe
// for concurrent use.
type Xero struct {
	accounting[XeroConnectionConfig, xeroLedger]
}

// NewXero returns the Xero provider. Zero fields of cfg take their defaults.
func NewXero(cfg AccountingConfig) *Xero {
	return &Xero{newAccounting[XeroConnectionConfig](NameXero, cfg, func(c accountingClient) xeroLedger { return xeroLedger{c} })}
}

// xeroLedger is Xero's part of the provider: its configuration, bodies,
// calls and reading of the answers (the ledger of accounting).
type xeroLedger struct{ c accountingClient }

// XeroConnectionConfig is a xero connection's config_json.
type XeroConnectionConfig struct {
	TenantID    string
	AccountCode string // default account of lines without a mapped one
	Status      string // DRAFT, SUBMITTED (default) or AUTHORISED
	APIBaseURL  *url.URL
	TokenURL    *url.URL
	Limits      Limits
	// ReplayWindow is how long Xero is trusted to replay a repeated
	// Idempotency-Key (config_json.replayWindowSeconds).
	ReplayWindow time.Duration
}

// ParseXeroConfig reads a xero connection's config_json. Keys are
// case-sensitive; unknown keys are ignored. Every error is ConfigInvalid
// and names the field.
func ParseXeroConfig(raw json.RawMessage, allowPrivate bool) (XeroConnectionConfig, error) {
	fields, err := configFields(raw)
	if err != nil {
		return XeroConnectionConfig{}, err
	}
	var c XeroConnectionConfig
	if c.TenantID, err = configString(fields, "tenantId"); err != nil {
		return c, err
	}
	if c.TenantID == "" {
		return c, configError("tenantId", "required")
	}
	if c.AccountCode, err = configString(fields, "accountCode"); err != nil {
		return c, err
	}
	if c.Status, err = configString(fields, "status"); err != nil {
		return c, err
	}
	switch c.Status {
	case "":
		c.Status = defaultXeroStatus
	case "DRAFT", "SUBMITTED", "AUTHORISED":
	default:
		return c, configError("status", "%q is not DRAFT, SUBMITTED or AUTHORISED", c.Status)
	}
	if c.ReplayWindow, err = replayWindow(fields); err != nil {
		return c, err
	}
	c.APIBaseURL, c.TokenURL, c.Limits, err = endpoints(fields, NameXero, DefaultXeroAPIBaseURL, DefaultXeroTokenURL, allowPrivate)
	return c, err
}

// replayWindow is config_json.replayWindowSeconds (ledger).
func (xeroLedger) replayWindow(cfg XeroConnectionConfig) time.Duration { return cfg.ReplayWindow }

// config is ParseXeroConfig (ledger).
func (xeroLedger) config(raw json.RawMessage, allowPrivate bool) (XeroConnectionConfig, error) {
	return ParseXeroConfig(raw, allowPrivate)
}

// Xero's request body, in its field names (testdata/xero_purchase_orders.schema.json).
type (
	xeroPurchaseOrders struct {
		PurchaseOrders []xeroPurchaseOrder `json:"PurchaseOrders"`
	}
	xeroPurchaseOrder struct {
		PurchaseOrderID string         `json:"PurchaseOrderID,omitempty"`
		Contact         xeroContact    `json:"Contact"`
		Reference       string         `json:"Reference,omitempty"`
		CurrencyCode    string         `json:"CurrencyCode"`
		Date            string         `json:"Date,omitempty"`
		Status          string         `json:"Status"`
		LineItems       []xeroLineItem `json:"LineItems"`
	}
	xeroContact struct {
		ContactID string `json:"ContactID"`
	}
	xeroLineItem struct {
		Description string      `json:"Description"`
		Quantity    json.Number `json:"Quantity"`
		UnitAmount  json.Number `json:"UnitAmount"`
		AccountCode string      `json:"AccountCode,omitempty"`
		ItemCode    string      `json:"ItemCode,omitempty"`
	}
)

// XeroIdempotencyKey is the Idempotency-Key sent for our key: the key
// itself, or "io-" and its SHA-256 hex when it is longer than Xero's 128
// characters.
func XeroIdempotencyKey(key string) string {
	return deriveKey(key, "io-", xeroMaxIdempotencyKey)
}

// orderBody is the purchase order's body (ledger).
func (xeroLedger) orderBody(cfg XeroConnectionConfig, cmd PurchaseOrderPush) ([]byte, error) {
	return xeroBody(cfg, cmd)
}

// xeroBody builds the request body of cmd for a connection with cfg.
func xeroBody(cfg XeroConnectionConfig, cmd PurchaseOrderPush) ([]byte, error) {
	if !isGUID(cmd.ExternalSupplierID) {
		return nil, payloadError("payload_json.externalSupplierId: %q is not a Xero ContactID (a GUID)", cmd.ExternalSupplierID)
	}
	o, err := parseOrder(cmd.PurchaseOrder)
	if err != nil {
		return nil, err
	}
	cur, err := currencyOf(o.CurrencyCode)
	if err != nil {
		return nil, err
	}
	items, err := itemMappings(cmd.Payload)
	if err != nil {
		return nil, err
	}
	po := xeroPurchaseOrder{Contact: xeroContact{ContactID: cmd.ExternalSupplierID}, Reference: o.OrderNumber,
		CurrencyCode: cur.code, Date: orderDate(o.CreatedAt), Status: cfg.Status}
	if cmd.Document != nil {
		po.PurchaseOrderID = cmd.Document.ID
	}
	for _, l := range o.Items {
		m := items[l.StockItemID]
		line := xeroLineItem{Description: lineDescription(l, m), ItemCode: m.ItemCode, AccountCode: m.AccountCode}
		if line.AccountCode == "" && line.ItemCode == "" {
			line.AccountCode = cfg.AccountCode
		}
		if line.AccountCode == "" && line.ItemCode == "" {
			return nil, payloadError("stock item %s: no itemCode or accountCode in payload_json.items and no config_json.accountCode", l.StockItemID)
		}
		if line.Quantity, err = quantity(l.Quantity); err != nil {
			return nil, err
		}
		unit, err := cur.amount(l.UnitPriceMinor)
		if err != nil {
			return nil, err
		}
		line.UnitAmount = json.Number(unit)
		po.LineItems = append(po.LineItems, line)
	}
	body, err := json.Marshal(xeroPurchaseOrders{PurchaseOrders: []xeroPurchaseOrder{po}})
	if err != nil {
		return nil, payloadError("encoding the Xero purchase order: %v", err)
	}
	return body, nil
}

// sendOrder creates the purchase order, or updates the one an earlier
// push created (cmd.Document).
func (x xeroLedger) sendOrder(ctx context.Context, p prepared[XeroConnectionConfig], cmd PurchaseOrderPush, cred credential.Credential) (Result, error) {
	// Create: POST /PurchaseOrders with summarizeErrors=false (a validation
	// error comes back per order in a 200). Update: POST
	// /PurchaseOrders/{PurchaseOrderID}, Xero's documented update of one
	// purchase order. unitdp=4 keeps unit amounts of three-decimal
	// currencies whole.
	target := *p.cfg.APIBaseURL
	q := url.Values{"unitdp": {"4"}}
	if cmd.Document != nil {
		target.Path += "/PurchaseOrders/" + url.PathEscape(cmd.Document.ID)
	} else {
		target.Path += "/PurchaseOrders"
		q.Set("summarizeErrors", "false")
	}
	target.RawQuery = q.Encode()
	a, err := x.c.do(ctx, http.MethodPost, &target, "apiBaseUrl", x.writeHeader(p, cmd.IdempotencyKey), p.body, cred)
	if err != nil {
		return Result{}, err
	}
	return x.interpret(a, cred)
}

// header returns the headers of every call to the connection's tenant.
func (x xeroLedger) header(cfg XeroConnectionConfig, auth string) http.Header {
	h := x.c.header(auth)
	h.Set("xero-tenant-id", cfg.TenantID)
	return h
}

// writeHeader returns the headers of a create or update: the tenant's, the JSON
// body's and the Idempotency-Key of our key.
func (x xeroLedger) writeHeader(p prepared[XeroConnectionConfig], key string) http.Header {
	h := x.header(p.cfg, p.auth)
	h.Set("Content-Type", "application/json")
	h.Set("Idempotency-Key", XeroIdempotencyKey(key))
	return h
}

// xeroAnswer is what we read of Xero's answers: the purchase orders or
// contacts of a 200 (with its pagination, on a list), the Error of a 400,
// the problem of a 401/403.
type xeroAnswer struct {
	PurchaseOrders []xeroElement
	Pagination     *struct{ Page, PageCount int } `json:"pagination"`
	Contacts       []xeroElement
	Type           *string
	Message        string
	Elements       []xeroElement
	Title          string
	Detail         string
}

// xeroElement is one purchase order or contact of an answer, or one
// element of a validation exception.
type xeroElement struct {
	PurchaseOrderID       string
	PurchaseOrderNumber   string
	Reference             string
	Status                string
	Contact               struct{ ContactID string }
	ContactID             string
	Name                  string
	ContactNumber         string
	StatusAttributeString string
	HasValidationErrors   bool
	ValidationErrors      []struct{ Message string }
}

// refused reports whether Xero refused the element, and its messages.
func (el xeroElement) refused() (bool, []string) {
	var msgs []string
	for _, v := range el.ValidationErrors {
		msgs = append(msgs, v.Message)
	}
	return len(msgs) > 0 || el.HasValidationErrors || el.StatusAttributeString == "ERROR", msgs
}

func decodeXeroAnswer(body []byte) xeroAnswer {
	var ans xeroAnswer
	_ = json.Unmarshal(body, &ans) // an answer we cannot read is quoted instead
	return ans
}

// xeroDayLimitPause caps the pause after Xero's daily limit: the
// Retry-After of a "day" problem names the limit's reset, up to a day off.
const xeroDayLimitPause = 24 * time.Hour

// interpret maps Xero's answer to a purchase order push to a Result or an
// *Error.
func (x xeroLedger) interpret(a answer, cred credential.Credential) (Result, error) {
	ans := decodeXeroAnswer(a.body)
	if a.status < 200 || a.status >= 300 {
		return Result{}, x.failure(a, ans, cred)
	}
	if len(ans.PurchaseOrders) == 0 || ans.PurchaseOrders[0].PurchaseOrderID == "" && len(ans.PurchaseOrders[0].ValidationErrors) == 0 {
		// Xero took the call but we cannot tell what it created: a retry
		// with the same Idempotency-Key gets the same answer.
		return Result{}, redactError(&Error{Kind: Retryable, StatusCode: a.status,
			Message: fmt.Sprintf("xero answered %d without a PurchaseOrderID: %s", a.status, quoteBody(a.body, cred))}, cred)
	}
	po := ans.PurchaseOrders[0]
	if refused, msgs := po.refused(); refused {
		return Result{}, redactError(&Error{Kind: Rejected, StatusCode: a.status,
			Message: "xero refused the purchase order: " + quoteBody([]byte(strings.Join(msgs, "; ")), cred)}, cred)
	}
	id := po.PurchaseOrderID
	if !isGUID(id) {
		return Result{}, redactError(&Error{Kind: Retryable, StatusCode: a.status,
			Message: "xero answered a PurchaseOrderID that is not a GUID: " + quoteBody([]byte(id), cred)}, cred)
	}
	return remembered(a.status, id, "", ""), nil
}

// failure classifies an answer of Xero that is not a 2xx: its own
// explanation quoted, rate limits pausing the connection (until the next
// day for the daily limit), 401/403 AuthFailed.
func (x xeroLedger) failure(a answer, ans xeroAnswer, cred credential.Credential) *Error {
	var detail string
	switch {
	case len(ans.Elements) > 0:
		var msgs []string
		for _, el := range ans.Elements {
			for _, v := range el.ValidationErrors {
				msgs = append(msgs, v.Message)
			}
		}
		detail = strings.Join(msgs, "; ")
		if ans.Type != nil && *ans.Type != "" {
			detail = *ans.Type + ": " + detail
		}
	case ans.Message != "":
		detail = ans.Message
	case ans.Detail != "" || ans.Title != "":
		detail = strings.TrimPrefix(ans.Title+": "+ans.Detail, ": ")
	}
	if detail != "" {
		detail = quoteBody([]byte(detail), cred)
	}
	e := x.c.statusError(a, detail, cred)
	if a.status == http.StatusTooManyRequests {
		problem := strings.TrimSpace(a.header.Get("X-Rate-Limit-Problem"))
		remaining := strings.TrimSpace(a.header.Get("X-DayLimit-Remaining"))
		if problem != "" {
			e.Message += " (rate limit: " + quoteBody([]byte(problem), cred) + ")"
		}
		if strings.EqualFold(problem, "day") || problem == "" && remaining == "0" {
			// The tenant's 5,000 calls of the day are spent: wait for the
			// reset Xero names, however far, instead of knocking every hour.
			e.DailyLimit = true
			e.RetryAfter = parseRetryAfterUpTo(a.header.Get("Retry-After"), x.c.cfg.Clock(), xeroDayLimitPause)
			if e.RetryAfter == 0 {
				e.RetryAfter = time.Hour
			}
			e.Message = "xero's daily call limit of the tenant is used up (X-DayLimit-Remaining: " +
				quoteBody([]byte(cmp.Or(remaining, "not given")), cred) + "): " + e.Message
		}
	}
	return e
}

// Xero's list of purchase orders: 100 a page unless told otherwise
// (pageSize); we read at most xeroLookupPages pages of one day's orders.
const (
	xeroPageSize    = 100
	xeroLookupPages = 50
)

// findOrders lists the purchase orders of the order's date (GET
// /PurchaseOrders with DateFrom and DateTo, page by page: Xero's API
// gives purchase orders no where filter) and keeps those with the
// order's number as Reference and its supplier as Contact, that are not
// DELETED. Without an order date the days from the first unknown attempt
// to tomorrow are read. An order without a number cannot be told apart:
// none is found, and the create goes.
func (x xeroLedger) findOrders(ctx context.Context, p prepared[XeroConnectionConfig], cmd PurchaseOrderPush, cred credential.Credential) (lookup, error) {
	o, err := parseOrder(cmd.PurchaseOrder)
	if err != nil {
		return lookup{}, err
	}
	ref := strings.TrimSpace(o.OrderNumber)
	l := lookup{what: fmt.Sprintf("with Reference %s for contact %s", quoteBody([]byte(ref), cred), cmd.ExternalSupplierID)}
	if ref == "" {
		return l, nil
	}
	from, to := orderDate(o.CreatedAt), ""
	if from == "" {
		now := x.c.cfg.Clock()
		since := now
		if cmd.Unknown != nil && !cmd.Unknown.Since.IsZero() {
			since = cmd.Unknown.Since
		}
		from, to = since.UTC().AddDate(0, 0, -1).Format(time.DateOnly), now.UTC().AddDate(0, 0, 1).Format(time.DateOnly)
	}
	for page := 1; ; page++ {
		if page > 1 {
			if err := nextCall(ctx); err != nil {
				return lookup{}, err
			}
		}
		target := *p.cfg.APIBaseURL
		target.Path += "/PurchaseOrders"
		target.RawQuery = url.Values{"DateFrom": {from}, "DateTo": {cmp.Or(to, from)}, "page": {fmt.Sprint(page)}}.Encode()
		a, err := x.c.do(ctx, http.MethodGet, &target, "apiBaseUrl", x.header(p.cfg, p.auth), nil, cred)
		if err != nil {
			return lookup{}, err
		}
		ans := decodeXeroAnswer(a.body)
		if a.status < 200 || a.status >= 300 {
			return lookup{}, x.failure(a, ans, cred)
		}
		l.status = a.status
		for _, po := range ans.PurchaseOrders {
			if isGUID(po.PurchaseOrderID) && strings.TrimSpace(po.Reference) == ref &&
				strings.EqualFold(po.Contact.ContactID, cmd.ExternalSupplierID) && po.Status != "DELETED" {
				l.docs = append(l.docs, found{Document: Document{ID: po.PurchaseOrderID}, label: po.PurchaseOrderNumber})
			}
		}
		last := len(ans.PurchaseOrders) < xeroPageSize
		if pg := ans.Pagination; pg != nil && pg.PageCount > 0 {
			last = pg.Page >= pg.PageCount || page >= pg.PageCount
		}
		if last {
			return l, nil
		}
		if page == xeroLookupPages {
			return lookup{}, redactError(&Error{Kind: Rejected, StatusCode: a.status, Message: fmt.Sprintf(
				"xero lists more than %d purchase orders dated %s to %s: too many to look through for the one an earlier attempt may have created; "+
					"check in Xero whether a purchase order %s exists before rerunning", xeroLookupPages*xeroPageSize, from, cmp.Or(to, from), l.what)}, cred)
		}
	}
}
