package provider

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"integration-outbox/internal/credential"
)

// QuickBooks Online defaults (config_json apiBaseUrl, tokenUrl,
// minorVersion). The sandbox companies live on another host
// (sandbox-quickbooks.api.intuit.com), set as apiBaseUrl.
const (
	DefaultQuickBooksAPIBaseURL   = "https://quickbooks.api.intuit.com"
	DefaultQuickBooksTokenURL     = "https://oauth.platform.intuit.com/oauth2/v1/tokens/bearer"
	DefaultQuickBooksMinorVersion = 75
)

// QuickBooks Online limits on what we send.
const (
	quickBooksMaxRequestID = 50 // requestid
	quickBooksMaxDocNumber = 21 // DocNumber
	quickBooksStaleObject  = "5010"
)

// QuickBooks is the "quickbooks" provider: it creates a purchase order in
// the connection's QuickBooks Online company (its realm) and, on a later
// push of the same order, updates that purchase order with a sparse update
// (docs/providers.md). It is safe for concurrent use.
type QuickBooks struct {
	accounting[QuickBooksConnectionConfig, qboLedger]
}

// NewQuickBooks returns the QuickBooks Online provider. Zero fields of cfg
// take their defaults.
func NewQuickBooks(cfg AccountingConfig) *QuickBooks {
	return &QuickBooks{newAccounting[QuickBooksConnectionConfig](NameQuickBooks, cfg, func(c accountingClient) qboLedger { return qboLedger{c} })}
}

// qboLedger is QuickBooks Online's part of the provider: its
// configuration, bodies, calls and reading of the answers (the ledger of
// accounting).
type qboLedger struct{ c accountingClient }

// QuickBooksConnectionConfig is a quickbooks connection's config_json.
type QuickBooksConnectionConfig struct {
	RealmID          string
	ExpenseAccountID string // default account of lines without a mapped item or account
	// APAccountID is the accounts-payable account of the purchase orders
	// (APAccountRef); empty: none is sent, which QuickBooks accepts only
	// where the company has a single accounts-payable account.
	APAccountID  string
	MinorVersion int
	APIBaseURL   *url.URL
	TokenURL     *url.URL
	Limits       Limits
	// ReplayWindow is how long QuickBooks is trusted to replay a repeated
	// requestid (config_json.replayWindowSeconds).
	ReplayWindow time.Duration
}

var realmID = regexp.MustCompile(`^[0-9]{1,32}$`)

// ParseQuickBooksConfig reads a quickbooks connection's config_json. Keys
// are case-sensitive; unknown keys are ignored. Every error is
// ConfigInvalid and names the field.
func ParseQuickBooksConfig(raw json.RawMessage, allowPrivate bool) (QuickBooksConnectionConfig, error) {
	fields, err := configFields(raw)
	if err != nil {
		return QuickBooksConnectionConfig{}, err
	}
	var c QuickBooksConnectionConfig
	if c.RealmID, err = configString(fields, "realmId"); err != nil {
		return c, err
	}
	switch {
	case c.RealmID == "":
		return c, configError("realmId", "required")
	case !realmID.MatchString(c.RealmID):
		return c, configError("realmId", "must be the company's numeric realm id")
	}
	if c.ExpenseAccountID, err = configString(fields, "expenseAccountId"); err != nil {
		return c, err
	}
	if c.APAccountID, err = configString(fields, "apAccountId"); err != nil {
		return c, err
	}
	c.MinorVersion = DefaultQuickBooksMinorVersion
	if raw, ok := fields["minorVersion"]; ok && string(raw) != "null" {
		// A number or a string of digits: both are common in hand-written config.
		var s string
		if json.Unmarshal(raw, &s) != nil {
			s = string(bytes.TrimSpace(raw))
		}
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return c, configError("minorVersion", "must be a positive integer")
		}
		c.MinorVersion = n
	}
	if c.ReplayWindow, err = replayWindow(fields); err != nil {
		return c, err
	}
	c.APIBaseURL, c.TokenURL, c.Limits, err = endpoints(fields, NameQuickBooks, DefaultQuickBooksAPIBaseURL, DefaultQuickBooksTokenURL, allowPrivate)
	return c, err
}

// replayWindow is config_json.replayWindowSeconds (ledger).
func (qboLedger) replayWindow(cfg QuickBooksConnectionConfig) time.Duration { return cfg.ReplayWindow }

// findOrders queries the purchase orders with the order's number as
// DocNumber (select * from PurchaseOrder where DocNumber = '…', the value
// quoted as the vendor look-up quotes it) and keeps those of the order's
// vendor (VendorRef). An order without a number cannot be told apart: none
// is found, and the create goes.
func (q qboLedger) findOrders(ctx context.Context, p prepared[QuickBooksConnectionConfig], cmd PurchaseOrderPush, cred credential.Credential) (lookup, error) {
	o, err := parseOrder(cmd.PurchaseOrder)
	if err != nil {
		return lookup{}, err
	}
	number := strings.TrimSpace(o.OrderNumber)
	l := lookup{what: fmt.Sprintf("with DocNumber %s for vendor %s", quoteBody([]byte(number), cred), quoteBody([]byte(cmd.ExternalSupplierID), cred))}
	if number == "" {
		return l, nil
	}
	a, ans, err := q.query(ctx, p, "select * from PurchaseOrder where DocNumber = "+quickBooksQuote(number), "", cred)
	if err != nil {
		return lookup{}, err
	}
	l.status = a.status
	if ans.QueryResponse != nil {
		for _, po := range ans.QueryResponse.PurchaseOrder {
			// The query is QuickBooks'; the comparison is ours too.
			if po.ID != "" && len(po.ID) <= maxExternalIDBytes && po.DocNumber == number &&
				po.VendorRef != nil && po.VendorRef.Value == cmd.ExternalSupplierID {
				l.docs = append(l.docs, found{Document: Document{ID: po.ID, SyncToken: po.SyncToken}})
			}
		}
	}
	return l, nil
}

// config is ParseQuickBooksConfig (ledger).
func (qboLedger) config(raw json.RawMessage, allowPrivate bool) (QuickBooksConnectionConfig, error) {
	return ParseQuickBooksConfig(raw, allowPrivate)
}

// QuickBooks Online's request body, in its field names: a PurchaseOrder
// of Intuit's data model (internal/testenv/qboschema checks every body the
// tests send).
type (
	qboPurchaseOrder struct {
		ID        string `json:"Id,omitempty"`
		SyncToken string `json:"SyncToken,omitempty"`
		Sparse    bool   `json:"sparse,omitempty"`
		VendorRef qboRef `json:"VendorRef"`
		// APAccountRef: required by QuickBooks where the company has more
		// than one accounts-payable account (config_json.apAccountId).
		APAccountRef *qboRef   `json:"APAccountRef,omitempty"`
		DocNumber    string    `json:"DocNumber,omitempty"`
		CurrencyRef  qboRef    `json:"CurrencyRef"`
		TxnDate      string    `json:"TxnDate,omitempty"`
		Line         []qboLine `json:"Line"`
	}
	qboRef struct {
		Value string `json:"value"`
	}
	qboLine struct {
		DetailType                    string                 `json:"DetailType"`
		Amount                        json.Number            `json:"Amount"`
		Description                   string                 `json:"Description,omitempty"`
		ItemBasedExpenseLineDetail    *qboItemBasedDetail    `json:"ItemBasedExpenseLineDetail,omitempty"`
		AccountBasedExpenseLineDetail *qboAccountBasedDetail `json:"AccountBasedExpenseLineDetail,omitempty"`
	}
	qboItemBasedDetail struct {
		ItemRef   qboRef      `json:"ItemRef"`
		Qty       json.Number `json:"Qty"`
		UnitPrice json.Number `json:"UnitPrice"`
	}
	qboAccountBasedDetail struct {
		AccountRef qboRef `json:"AccountRef"`
	}
)

// QuickBooksRequestID is the requestid sent for our key: the key itself,
// or "io-" and its SHA-256 hex cut to QuickBooks' 50 characters when it is
// longer. QuickBooks answers a repeated requestid with its first answer.
func QuickBooksRequestID(key string) string {
	return deriveKey(key, "io-", quickBooksMaxRequestID)
}

// orderBody is the purchase order's body (ledger).
func (qboLedger) orderBody(cfg QuickBooksConnectionConfig, cmd PurchaseOrderPush) ([]byte, error) {
	return quickBooksBody(cfg, cmd, cmd.Document)
}

// quickBooksBody builds the request body of cmd for a connection with cfg;
// doc, when set, makes it a sparse update of that purchase order.
func quickBooksBody(cfg QuickBooksConnectionConfig, cmd PurchaseOrderPush, doc *Document) ([]byte, error) {
	if strings.TrimSpace(cmd.ExternalSupplierID) == "" {
		return nil, payloadError("payload_json.externalSupplierId: missing or empty (the QuickBooks vendor Id)")
	}
	o, err := parseOrder(cmd.PurchaseOrder)
	if err != nil {
		return nil, err
	}
	// QuickBooks Online takes at most 21 characters; a cut number could
	// name another order, so a longer one is refused rather than cut.
	if n := utf8.RuneCountInString(o.OrderNumber); n > quickBooksMaxDocNumber {
		return nil, payloadError("order number %q has %d characters; QuickBooks DocNumber takes at most %d",
			o.OrderNumber, n, quickBooksMaxDocNumber)
	}
	cur, err := currencyOf(o.CurrencyCode)
	if err != nil {
		return nil, err
	}
	items, err := itemMappings(cmd.Payload)
	if err != nil {
		return nil, err
	}
	po := qboPurchaseOrder{VendorRef: qboRef{cmd.ExternalSupplierID}, DocNumber: o.OrderNumber,
		CurrencyRef: qboRef{cur.code}, TxnDate: orderDate(o.CreatedAt)}
	if cfg.APAccountID != "" {
		po.APAccountRef = &qboRef{cfg.APAccountID}
	}
	if doc != nil {
		po.ID, po.SyncToken, po.Sparse = doc.ID, doc.SyncToken, true
	}
	for _, l := range o.Items {
		m := items[l.StockItemID]
		qty, err := quantity(l.Quantity)
		if err != nil {
			return nil, err
		}
		amount, err := cur.lineAmount(qty, l.UnitPriceMinor)
		if err != nil {
			return nil, err
		}
		line := qboLine{Amount: json.Number(amount), Description: lineDescription(l, m)}
		switch account := cmp.Or(m.AccountID, cfg.ExpenseAccountID); {
		case m.ItemID != "":
			unit, err := cur.amount(l.UnitPriceMinor)
			if err != nil {
				return nil, err
			}
			line.DetailType = "ItemBasedExpenseLineDetail"
			line.ItemBasedExpenseLineDetail = &qboItemBasedDetail{ItemRef: qboRef{m.ItemID}, Qty: qty, UnitPrice: json.Number(unit)}
		case account != "":
			line.DetailType = "AccountBasedExpenseLineDetail"
			line.AccountBasedExpenseLineDetail = &qboAccountBasedDetail{AccountRef: qboRef{account}}
		default:
			return nil, payloadError("stock item %s: no itemId or accountId in payload_json.items and no config_json.expenseAccountId", l.StockItemID)
		}
		po.Line = append(po.Line, line)
	}
	body, err := json.Marshal(po)
	if err != nil {
		return nil, payloadError("encoding the QuickBooks purchase order: %v", err)
	}
	return body, nil
}

// sendOrder creates the order in QuickBooks Online, or updates the
// purchase order an earlier push created (cmd.Document) with a sparse
// update. When that update finds the SyncToken stale (error 5010), it reads
// the purchase order's current SyncToken once and tries once more.
func (q qboLedger) sendOrder(ctx context.Context, p prepared[QuickBooksConnectionConfig], cmd PurchaseOrderPush, cred credential.Credential) (Result, error) {
	res, _, err := q.write(ctx, p, qboPurchaseOrderEntity, cmd.IdempotencyKey, cmd.Document,
		func(doc *Document) ([]byte, error) { return quickBooksBody(p.cfg, cmd, doc) }, cred)
	return res, err
}

// qboEntity is one kind of QuickBooks object we write: its path under the
// company, its key in answers, and its name in messages.
type qboEntity struct {
	path, key, label string
}

var (
	qboPurchaseOrderEntity = qboEntity{path: "purchaseorder", key: "PurchaseOrder", label: "purchase order"}
	qboVendorEntity        = qboEntity{path: "vendor", key: "Vendor", label: "vendor"}
)

// write sends body, a create of entity or, with doc, its sparse update, and
// interprets the answer. When the update finds the SyncToken stale (error
// 5010), someone changed the object since we last wrote it: write reads its
// current SyncToken and sends the update rebuilt by rebuild once more, under
// a requestid of its own (QuickBooks would replay the stale answer for the
// first one). The decoded answer lets the caller look at its fault codes.
func (q qboLedger) write(ctx context.Context, p prepared[QuickBooksConnectionConfig], entity qboEntity, key string,
	doc *Document, rebuild func(*Document) ([]byte, error), cred credential.Credential) (Result, qboAnswer, error) {
	cfg, auth, body := p.cfg, p.auth, p.body
	res, ans, err := q.post(ctx, cfg, auth, entity, QuickBooksRequestID(key), body, cred)
	if err == nil || doc == nil || !ans.hasCode(quickBooksStaleObject) {
		return res, ans, err
	}
	token, err := q.syncToken(ctx, cfg, auth, entity, doc.ID, cred)
	if err != nil {
		return Result{}, qboAnswer{}, err
	}
	if body, err = rebuild(&Document{ID: doc.ID, SyncToken: token}); err != nil {
		return Result{}, qboAnswer{}, err
	}
	res, ans, err = q.post(ctx, cfg, auth, entity, QuickBooksRequestID(key+"#synctoken="+token), body, cred)
	if err != nil && ans.hasCode(quickBooksStaleObject) {
		// Changed again meanwhile: a later attempt reads it anew.
		var perr *Error
		if errors.As(err, &perr) {
			perr.Kind = Retryable
		}
	}
	return res, ans, err
}

// url returns {apiBaseUrl}/v3/company/{realmId}/{rest} with query q and
// minorversion.
func (cfg QuickBooksConnectionConfig) url(rest string, q url.Values) *url.URL {
	u := *cfg.APIBaseURL
	u.Path += "/v3/company/" + url.PathEscape(cfg.RealmID) + "/" + rest
	q.Set("minorversion", strconv.Itoa(cfg.MinorVersion))
	u.RawQuery = q.Encode()
	return &u
}

// post sends an entity (create or sparse update) and interprets the
// answer; the decoded answer lets the caller look at its fault codes.
func (q qboLedger) post(ctx context.Context, cfg QuickBooksConnectionConfig, auth string, entity qboEntity, requestID string,
	body []byte, cred credential.Credential) (Result, qboAnswer, error) {
	a, err := q.c.do(ctx, http.MethodPost, cfg.url(entity.path, url.Values{"requestid": {requestID}}), "apiBaseUrl", q.c.jsonHeader(auth), body, cred)
	if err != nil {
		return Result{}, qboAnswer{}, err
	}
	ans := decodeQBOAnswer(a.body)
	if err := q.failure(a, ans, cred); err != nil {
		return Result{}, ans, err
	}
	obj := ans.object(entity)
	if obj == nil || obj.ID == "" || len(obj.ID) > maxExternalIDBytes {
		// Taken, but we cannot tell what it created: the same requestid
		// gets the same answer.
		return Result{}, ans, redactError(&Error{Kind: Retryable, StatusCode: a.status, Message: fmt.Sprintf(
			"quickbooks answered %d without a %s Id: %s", a.status, entity.key, quoteBody(a.body, cred))}, cred)
	}
	return remembered(a.status, obj.ID, obj.SyncToken, ""), ans, nil
}

// get reads {apiBaseUrl}/v3/company/{realmId}/{rest} with query v and
// decodes the answer. A failure's message begins with what, when given.
func (q qboLedger) get(ctx context.Context, cfg QuickBooksConnectionConfig, auth, rest string, v url.Values, what string,
	cred credential.Credential) (answer, qboAnswer, error) {
	a, err := q.c.do(ctx, http.MethodGet, cfg.url(rest, v), "apiBaseUrl", q.c.header(auth), nil, cred)
	if err != nil {
		return a, qboAnswer{}, err
	}
	ans := decodeQBOAnswer(a.body)
	if ferr := q.failure(a, ans, cred); ferr != nil {
		if what != "" {
			ferr.Message = what + ": " + ferr.Message
		}
		return a, ans, ferr
	}
	return a, ans, nil
}

// query runs a statement of QuickBooks' query language (get of "query").
func (q qboLedger) query(ctx context.Context, p prepared[QuickBooksConnectionConfig], statement, what string,
	cred credential.Credential) (answer, qboAnswer, error) {
	return q.get(ctx, p.cfg, p.auth, "query", url.Values{"query": {statement}}, what, cred)
}

// syncToken reads the current SyncToken of entity id.
func (q qboLedger) syncToken(ctx context.Context, cfg QuickBooksConnectionConfig, auth string, entity qboEntity, id string,
	cred credential.Credential) (string, error) {
	a, ans, err := q.get(ctx, cfg, auth, entity.path+"/"+url.PathEscape(id), url.Values{}, "reading the "+entity.label+"'s SyncToken", cred)
	if err != nil {
		return "", err
	}
	if obj := ans.object(entity); obj != nil && obj.SyncToken != "" {
		return obj.SyncToken, nil
	}
	return "", redactError(&Error{Kind: Retryable, StatusCode: a.status, Message: fmt.Sprintf(
		"quickbooks answered %d to reading %s %s without a SyncToken", a.status, entity.label, id)}, cred)
}

// qboAnswer is what we read of QuickBooks' answers: the purchase order, or
// a Fault (keys match case-insensitively: the authentication faults come
// as "fault"/"error"/"message").
type qboAnswer struct {
	PurchaseOrder *qboObject `json:"PurchaseOrder"`
	Vendor        *qboObject `json:"Vendor"`
	QueryResponse *struct {
		Vendor        []qboObject `json:"Vendor"`
		PurchaseOrder []qboObject `json:"PurchaseOrder"`
	} `json:"QueryResponse"`
	Fault *struct {
		Type  string `json:"type"`
		Error []struct {
			Message string `json:"Message"`
			Detail  string `json:"Detail"`
			Code    string `json:"code"`
			Element string `json:"element"`
		} `json:"Error"`
	} `json:"Fault"`
}

// qboObject is what we read of an object QuickBooks answers.
type qboObject struct {
	ID          string  `json:"Id"`
	SyncToken   string  `json:"SyncToken"`
	DisplayName string  `json:"DisplayName"`
	DocNumber   string  `json:"DocNumber"`
	VendorRef   *qboRef `json:"VendorRef"`
}

// object is the answer's object of entity, nil when it has none.
func (a qboAnswer) object(entity qboEntity) *qboObject {
	switch entity {
	case qboPurchaseOrderEntity:
		return a.PurchaseOrder
	case qboVendorEntity:
		return a.Vendor
	}
	return nil
}

func decodeQBOAnswer(body []byte) qboAnswer {
	var a qboAnswer
	_ = json.Unmarshal(body, &a) // an answer we cannot read is quoted instead
	return a
}

func (a qboAnswer) hasCode(code string) bool {
	if a.Fault == nil {
		return false
	}
	for _, e := range a.Fault.Error {
		if e.Code == code {
			return true
		}
	}
	return false
}

// faultText is the Fault's errors as "code message: detail; …".
func (a qboAnswer) faultText() string {
	if a.Fault == nil {
		return ""
	}
	var parts []string
	for _, e := range a.Fault.Error {
		s := strings.TrimSpace(e.Code + " " + e.Message)
		if e.Detail != "" && e.Detail != e.Message {
			s += ": " + e.Detail
		}
		parts = append(parts, s)
	}
	text := strings.Join(parts, "; ")
	if a.Fault.Type != "" {
		text = a.Fault.Type + ": " + text
	}
	return text
}

// quickBooksThrottleWindow is how long a throttled QuickBooks Online
// connection pauses when the answer gives no Retry-After: its limits are
// counted per minute (500 requests per company).
const quickBooksThrottleWindow = time.Minute

// failure classifies an answer that is not a success: a non-2xx status,
// or a Fault in a 2xx, which is classified by its type as the status it
// stands for would be. nil means success.
func (q qboLedger) failure(a answer, ans qboAnswer, cred credential.Credential) *Error {
	ok := a.status >= 200 && a.status < 300
	if ok && ans.Fault == nil {
		return nil
	}
	detail := ans.faultText()
	if detail != "" {
		detail = quoteBody([]byte(detail), cred)
	}
	if !ok {
		e := q.c.statusError(a, detail, cred)
		if e.PauseConnection && e.RetryAfter == 0 {
			// Intuit's throttling (ThrottleExceeded, 003001) counts the
			// requests of a company per minute and sends no Retry-After:
			// the next minute is a fresh window.
			e.RetryAfter = quickBooksThrottleWindow
		}
		return e
	}
	as := a
	switch t := strings.ToLower(ans.Fault.Type); {
	case strings.Contains(t, "authentication"):
		as.status = http.StatusUnauthorized
	case strings.Contains(t, "authorization"):
		as.status = http.StatusForbidden
	case strings.Contains(t, "system"):
		as.status = http.StatusInternalServerError
	default: // ValidationFault and anything else: the provider refused it
		as.status = http.StatusBadRequest
	}
	e := q.c.statusError(as, detail, cred)
	e.StatusCode = a.status
	e.Message = fmt.Sprintf("quickbooks answered %d with a Fault: %s", a.status, detail)
	return redactError(e, cred)
}
