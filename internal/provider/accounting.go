package provider

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/text/currency"

	"integration-outbox/internal/credential"
)

// What the accounting providers (xero, quickbooks) share: reading the order
// document and the command's item mapping, money in a currency's minor
// units, their config_json limits and URLs, and key derivation.

// Limits is how hard a connection may be driven: commands in flight at once
// and calls per minute. Each accounting provider has its defaults (what its
// API allows one connection); config_json "maxInFlight" and "callsPerMinute"
// override them. The claim and a fleet-wide rate limiter read them.
type Limits struct {
	MaxInFlight    int
	CallsPerMinute int
}

// Default limits per provider: Xero allows 5 concurrent calls and 60 calls
// a minute per tenant; QuickBooks Online 10 concurrent calls and 500 a
// minute per company.
const (
	XeroMaxInFlight          = 5
	XeroCallsPerMinute       = 60
	QuickBooksMaxInFlight    = 10
	QuickBooksCallsPerMinute = 500
)

// DefaultLimits returns the default limits of a provider by name, and false
// for a provider that has none.
func DefaultLimits(providerName string) (Limits, bool) {
	switch providerName {
	case NameXero:
		return Limits{MaxInFlight: XeroMaxInFlight, CallsPerMinute: XeroCallsPerMinute}, true
	case NameQuickBooks:
		return Limits{MaxInFlight: QuickBooksMaxInFlight, CallsPerMinute: QuickBooksCallsPerMinute}, true
	}
	return Limits{}, false
}

// ConnectionLimits returns the limits of a connection of an accounting
// provider: its defaults with config_json's "maxInFlight" and
// "callsPerMinute" over them. An override that is not a positive integer is
// a ConfigInvalid error naming it.
func ConnectionLimits(providerName string, config json.RawMessage) (Limits, error) {
	l, ok := DefaultLimits(providerName)
	if !ok {
		return Limits{}, &Error{Kind: ConfigInvalid, Message: fmt.Sprintf("provider %q has no default limits", providerName)}
	}
	fields, err := configFields(config)
	if err != nil {
		return Limits{}, err
	}
	if err := limitsFrom(fields, &l); err != nil {
		return Limits{}, err
	}
	return l, nil
}

func limitsFrom(fields map[string]json.RawMessage, l *Limits) error {
	for _, f := range []struct {
		key string
		dst *int
	}{{"maxInFlight", &l.MaxInFlight}, {"callsPerMinute", &l.CallsPerMinute}} {
		raw, ok := fields[f.key]
		if !ok || string(raw) == "null" {
			continue
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 32)
		if err != nil || n < 1 {
			return configError(f.key, "must be a positive integer")
		}
		*f.dst = int(n)
	}
	return nil
}

// configFields decodes config_json into its top-level fields.
func configFields(raw json.RawMessage) (map[string]json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return nil, &Error{Kind: ConfigInvalid, Message: "config_json is not a JSON object"}
	}
	return fields, nil
}

func configError(key, format string, args ...any) *Error {
	return &Error{Kind: ConfigInvalid, Message: "config_json." + key + ": " + fmt.Sprintf(format, args...)}
}

// configString reads an optional string field; absent and null give "".
func configString(fields map[string]json.RawMessage, key string) (string, error) {
	raw, ok := fields[key]
	if !ok || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", configError(key, "not a string")
	}
	return strings.TrimSpace(s), nil
}

// endpoints reads what every OAuth2 accounting connection has: its
// apiBaseUrl and tokenUrl (api and token when absent) and its limits
// (maxInFlight, callsPerMinute; the provider name's defaults).
func endpoints(fields map[string]json.RawMessage, name, api, token string, allowPrivate bool) (apiURL, tokenURL *url.URL, l Limits, err error) {
	if apiURL, err = configURL(fields, "apiBaseUrl", api, allowPrivate); err != nil {
		return nil, nil, l, err
	}
	if tokenURL, err = configURL(fields, "tokenUrl", token, allowPrivate); err != nil {
		return nil, nil, l, err
	}
	l, _ = DefaultLimits(name)
	err = limitsFrom(fields, &l)
	return apiURL, tokenURL, l, err
}

// configURL reads an optional base URL (apiBaseUrl, tokenUrl), def when
// absent. It must be an absolute https URL without query or fragment whose
// host is not a loopback, private or other non-public address or localhost;
// with allowPrivate (WEBHOOK_ALLOW_PRIVATE_NETWORKS) http and such hosts
// are allowed. The connection itself is guarded again at connect time.
func configURL(fields map[string]json.RawMessage, key, def string, allowPrivate bool) (*url.URL, error) {
	s, err := configString(fields, key)
	if err != nil {
		return nil, err
	}
	if s == "" {
		s = def
	}
	u, err := url.Parse(s)
	if err != nil || !u.IsAbs() || u.Hostname() == "" {
		return nil, configError(key, "not an absolute URL")
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, configError(key, "must not carry a query, fragment or user")
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, configError(key, "port %q out of range", port)
		}
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !allowPrivate {
			return nil, configError(key, "must use https (http is allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS)")
		}
	default:
		return nil, configError(key, "scheme %q is not http(s)", u.Scheme)
	}
	if !allowPrivate {
		host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
		if a, err := netip.ParseAddr(host); (err == nil && !isPublicAddr(a)) || host == "localhost" || strings.HasSuffix(host, ".localhost") {
			return nil, configError(key, "host %s is not public (allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS)", host)
		}
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return u, nil
}

// orderDocument is what the accounting providers read of
// PurchaseOrderPush.PurchaseOrder (docs/receivers.md).
type orderDocument struct {
	ID           string      `json:"id"`
	OrderNumber  string      `json:"orderNumber"`
	CurrencyCode string      `json:"currencyCode"`
	CreatedAt    string      `json:"createdAt"`
	Items        []orderLine `json:"items"`
}

type orderLine struct {
	ID             string      `json:"id"`
	StockItemID    string      `json:"stockItemId"`
	Quantity       json.Number `json:"quantity"`
	UnitCode       string      `json:"unitCode"`
	UnitPriceMinor json.Number `json:"unitPriceMinor"`
}

func payloadError(format string, args ...any) *Error {
	return &Error{Kind: PayloadInvalid, Message: fmt.Sprintf(format, args...)}
}

// parseOrder decodes the order document and checks what every accounting
// provider needs: at least one line, each with a quantity and a price.
func parseOrder(raw json.RawMessage) (orderDocument, error) {
	var o orderDocument
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&o); err != nil {
		return o, payloadError("purchase order document: %v", err)
	}
	if len(o.Items) == 0 {
		return o, payloadError("purchase order %s has no lines", o.ID)
	}
	for _, l := range o.Items {
		if l.Quantity == "" {
			return o, payloadError("purchase order line %s (stock item %s): no ordered quantity", l.ID, l.StockItemID)
		}
		if l.UnitPriceMinor == "" {
			return o, payloadError("purchase order line %s (stock item %s): no unit price", l.ID, l.StockItemID)
		}
	}
	return o, nil
}

// orderDate is the order's date (YYYY-MM-DD, UTC) from its created_at, or
// "" when it has none the provider could read: the provider then uses today.
func orderDate(createdAt string) string {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999"} {
		if t, err := time.Parse(layout, createdAt); err == nil {
			return t.UTC().Format(time.DateOnly)
		}
	}
	return ""
}

// money is an amount's currency: its ISO 4217 code and how many digits its
// minor unit has (JPY 0, USD 2, KWD 3).
type money struct {
	code  string
	scale int
}

var isoCode = regexp.MustCompile(`^[A-Z]{3}$`)

// currencyOf returns the currency of code; an unknown code is PayloadInvalid
// naming it.
func currencyOf(code string) (money, error) {
	if !isoCode.MatchString(code) {
		return money{}, payloadError("purchase order currency %q is not an ISO 4217 code", code)
	}
	unit, ok := knownCurrency(code)
	if !ok {
		return money{}, payloadError("purchase order currency %q is not a known ISO 4217 currency", code)
	}
	scale, _ := currency.Standard.Rounding(unit)
	return money{code: code, scale: scale}, nil
}

// knownCurrency returns the ISO 4217 currency of code, false for a code
// that names none.
func knownCurrency(code string) (currency.Unit, bool) {
	unit, err := currency.ParseISO(code)
	return unit, err == nil && unit.String() != "XXX" && isoCode.MatchString(code)
}

// amount returns an amount in minor units (an integer) as a decimal string
// in the currency's major unit: 1999 USD → "19.99", 1999 JPY → "1999",
// 1999 KWD → "1.999". No float is involved.
func (m money) amount(minor json.Number) (string, error) {
	n, ok := new(big.Int).SetString(string(minor), 10)
	if !ok {
		return "", payloadError("unit price %q (minor units) is not an integer", string(minor))
	}
	return new(big.Rat).SetFrac(n, pow10(m.scale)).FloatString(m.scale), nil
}

// lineAmount returns quantity × unit price, rounded half away from zero to
// the currency's minor unit, as a decimal string.
func (m money) lineAmount(quantity, unitMinor json.Number) (string, error) {
	q, err := decimal(quantity)
	if err != nil {
		return "", err
	}
	n, ok := new(big.Int).SetString(string(unitMinor), 10)
	if !ok {
		return "", payloadError("unit price %q (minor units) is not an integer", string(unitMinor))
	}
	r := new(big.Rat).Mul(q, new(big.Rat).SetFrac(n, pow10(m.scale)))
	return r.FloatString(m.scale), nil
}

// quantity returns a line's quantity as the exact decimal it was sent,
// checked to be a finite non-negative number.
func quantity(q json.Number) (json.Number, error) {
	r, err := decimal(q)
	if err != nil {
		return "", err
	}
	if r.Sign() < 0 {
		return "", payloadError("quantity %s is negative", q)
	}
	return q, nil
}

func decimal(s json.Number) (*big.Rat, error) {
	r, ok := new(big.Rat).SetString(string(s))
	if !ok || !json.Valid([]byte(s)) {
		return nil, payloadError("quantity %q is not a decimal number", string(s))
	}
	return r, nil
}

func pow10(n int) *big.Int {
	return new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n)), nil)
}

// ItemMapping is one stock item's mapping in payload_json.items, keyed by
// the stock item id: Xero reads itemCode and accountCode, QuickBooks itemId
// and accountId; description, when set, replaces the line's default text.
type ItemMapping struct {
	ItemCode    string `json:"itemCode,omitempty"`
	AccountCode string `json:"accountCode,omitempty"`
	ItemID      string `json:"itemId,omitempty"`
	AccountID   string `json:"accountId,omitempty"`
	Description string `json:"description,omitempty"`
}

// itemMappings reads payload_json.items; absent or null is no mapping.
func itemMappings(payload json.RawMessage) (map[string]ItemMapping, error) {
	if len(payload) == 0 {
		return nil, nil
	}
	var p struct {
		Items map[string]ItemMapping `json:"items"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return nil, payloadError("payload_json.items: must map stock item ids to objects of strings (%v)", err)
	}
	return p.Items, nil
}

// lineDescription is the text of a line: the mapping's description, else
// the stock item and its purchase unit.
func lineDescription(l orderLine, m ItemMapping) string {
	if m.Description != "" {
		return m.Description
	}
	if l.UnitCode != "" {
		return fmt.Sprintf("Stock item %s (%s)", l.StockItemID, l.UnitCode)
	}
	return "Stock item " + l.StockItemID
}

var guid = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// isGUID reports whether s is a GUID in its 8-4-4-4-12 hex form.
func isGUID(s string) bool { return guid.MatchString(s) }

// deriveKey returns key when it is at most max bytes long, else prefix
// followed by the SHA-256 hex of key, cut to max when longer:
// deterministic, so a retry sends the same derived key.
func deriveKey(key, prefix string, max int) string {
	if len(key) <= max {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	derived := prefix + hex.EncodeToString(sum[:])
	return derived[:min(len(derived), max)]
}

// fieldLimit is one supplier field as a provider takes it: the payload_json
// key it came from, its value, and the most characters the provider's field
// (named in messages) takes.
type fieldLimit struct {
	key, value, target string
	max                int
}

// checkLengths refuses, naming the payload field and the provider's, the
// first value longer than the provider takes: cutting a name or a tax
// number would send another one.
func checkLengths(fields []fieldLimit) error {
	for _, f := range fields {
		if n := utf8.RuneCountInString(f.value); n > f.max {
			return payloadError("payload_json.%s: %d characters; %s takes at most %d", f.key, n, f.target, f.max)
		}
	}
	return nil
}

// supplierCurrency checks the supplier's default currency, when it has one.
func supplierCurrency(code string) error {
	if _, ok := knownCurrency(code); code != "" && !ok {
		return payloadError("payload_json.currencyCode: %q is not a known ISO 4217 currency", code)
	}
	return nil
}

// bearer returns the Authorization value of cred, or a ConfigInvalid error
// when it holds no access token: the accounting providers cannot call
// without one (the secret's "accessToken", or "token").
func bearer(providerName string, cred credential.Credential) (string, error) {
	if cred.Token.IsZero() {
		return "", &Error{Kind: ConfigInvalid, Message: providerName +
			": the connection's credential holds no access token (credential_reference missing or its secret without one)"}
	}
	return "Bearer " + cred.Token.Reveal(), nil
}
