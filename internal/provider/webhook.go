package provider

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"integration-outbox/internal/credential"
)

// Webhook defaults (docs/receivers.md: time limit and response body).
const (
	DefaultWebhookTimeout      = 10 * time.Second
	DefaultWebhookMaxBodyBytes = 1 << 20 // 1 MiB
)

// maxRetryAfter caps a provider's Retry-After: a misbehaving provider must
// not park a row for days. It matches the longest backoff of the retry rule.
const maxRetryAfter = time.Hour

// maxQuotedBody is how much of a response body an error message quotes.
const maxQuotedBody = 500

// WebhookConfig configures the webhook provider.
type WebhookConfig = HTTPConfig

// Webhook is the "webhook" provider: it POSTs each command as JSON to the
// connection's config_json.url. It is safe for concurrent use and keeps one
// http.Client (and its keep-alive connections) for its whole life.
type Webhook struct {
	cfg    WebhookConfig
	client *http.Client
}

// NewWebhook returns a webhook provider. Zero fields of cfg take their
// defaults. Unless cfg.AllowPrivateNetworks, its client refuses, at connect
// time, every target address that is not public (see isPublicAddr).
func NewWebhook(cfg WebhookConfig) *Webhook {
	cfg = cfg.withDefaults()
	return &Webhook{cfg: cfg, client: cfg.client()}
}

// Name is "webhook".
func (w *Webhook) Name() string { return NameWebhook }

// CloseIdleConnections closes the client's idle keep-alive connections.
func (w *Webhook) CloseIdleConnections() { w.client.CloseIdleConnections() }

// webhookBody is the request body; field order is the wire order.
type webhookBody struct {
	CommandType        string          `json:"commandType"`
	IdempotencyKey     string          `json:"idempotencyKey"`
	ExternalSupplierID string          `json:"externalSupplierId"`
	PurchaseOrder      json.RawMessage `json:"purchaseOrder"`
}

// PushPurchaseOrder POSTs cmd to the connection's URL. Every failure is an
// *Error whose Kind says whether a retry can help; its text never contains a
// value of cred.
func (w *Webhook) PushPurchaseOrder(ctx context.Context, conn Connection, cred credential.Credential, cmd PurchaseOrderPush) (Result, error) {
	target, err := parseWebhookConfig(conn.Config, w.cfg.AllowPrivateNetworks)
	if err != nil {
		return Result{}, err
	}
	body, err := encodeWebhookBody(cmd)
	if err != nil {
		return Result{}, err
	}
	return w.send(ctx, target, cred, cmd.IdempotencyKey, body)
}

// PushSupplier POSTs the supplier to the connection's URL as a signed event
// like the purchase order's (docs/receivers.md): same headers, signatures
// and treatment of the answer. Every failure is an *Error whose Kind says
// whether a retry can help; its text never contains a value of cred.
func (w *Webhook) PushSupplier(ctx context.Context, conn Connection, cred credential.Credential, cmd SupplierPush) (Result, error) {
	target, err := parseWebhookConfig(conn.Config, w.cfg.AllowPrivateNetworks)
	if err != nil {
		return Result{}, err
	}
	body, err := encodeSupplierBody(cmd)
	if err != nil {
		return Result{}, err
	}
	return w.send(ctx, target, cred, cmd.IdempotencyKey, body)
}

// send POSTs one signed body under idempotency key key and interprets the
// answer.
func (w *Webhook) send(ctx context.Context, target *url.URL, cred credential.Credential, key string, body []byte) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout) // keeps an earlier ctx deadline
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target.String(), bytes.NewReader(body))
	if err != nil {
		return Result{}, &Error{Kind: ConfigInvalid, Message: "config_json.url: building request", Err: hideURL(err, target)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "integration-outbox-webhook/1")
	req.Header.Set("Idempotency-Key", key)
	if !cred.Token.IsZero() {
		req.Header.Set("Authorization", "Bearer "+cred.Token.Reveal())
	}
	if err := signRequest(req.Header, cred, key, w.cfg.Clock(), body); err != nil {
		return Result{}, err
	}

	resp, err := w.client.Do(req)
	if err != nil {
		return Result{}, classifyTransportError(hideURL(err, target), w.cfg.Timeout, cred)
	}
	defer resp.Body.Close()
	// An answer that carries an id is read up to the cap; of any other only
	// what an error message can quote, and a byte to tell that there was more.
	limit := w.cfg.MaxBodyBytes
	if !answersWithID(resp.StatusCode) {
		limit = min(limit, int64(quotePrefixLen(cred))+1)
	}
	respBody, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		// Without the whole answer the order's reference would be lost;
		// the idempotency key makes a retry safe.
		return Result{}, redactError(&Error{
			Kind:       Retryable,
			StatusCode: resp.StatusCode,
			Message:    fmt.Sprintf("webhook: reading the %d response body", resp.StatusCode),
			Err:        hideURL(err, target),
		}, cred)
	}
	return interpretResponse(resp.StatusCode, resp.Header, respBody, req.URL, w.cfg.Clock(), cred)
}

// signRequest sets the signature headers of a call sent at t when cred has
// signing secrets: X-Outbox-Signature and the Standard Webhooks trio
// webhook-id (the idempotency key), webhook-timestamp and webhook-signature,
// each with one signature per secret, newest first. Without a signing
// secret only webhook-id and webhook-timestamp are set.
func signRequest(h http.Header, cred credential.Credential, id string, t time.Time, body []byte) error {
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(t.Unix(), 10))
	secrets := cred.SigningKeys()
	if len(secrets) == 0 {
		return nil
	}
	plain := make([]string, 0, len(secrets))
	keys := make([][]byte, 0, len(secrets))
	for _, s := range secrets {
		key, err := s.StandardWebhooksKey()
		if err != nil {
			// The resolver refuses such a secret; only a credential built
			// in code can get here.
			return &Error{Kind: ConfigInvalid, Message: "credential signing secret: " + err.Error()}
		}
		plain = append(plain, s.Reveal())
		keys = append(keys, key)
	}
	h.Set("X-Outbox-Signature", OutboxSignature(plain, t, body))
	h.Set("webhook-signature", StandardWebhooksSignature(keys, id, t, body))
	return nil
}

// OutboxSignature returns the X-Outbox-Signature value for body sent at t:
// "t=<unix seconds>,v1=<hex>[,v1=<hex>…]", one v1 per secret in the given
// order, each the HMAC-SHA256 keyed with the secret's UTF-8 bytes of
// "<t>." + body (Stripe's scheme, which allows several v1).
func OutboxSignature(secrets []string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	var b strings.Builder
	b.WriteString("t=" + ts)
	for _, secret := range secrets {
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(ts + "."))
		mac.Write(body)
		b.WriteString(",v1=" + hex.EncodeToString(mac.Sum(nil)))
	}
	return b.String()
}

// StandardWebhooksSignature returns the Standard Webhooks webhook-signature
// value for body with message id id sent at t: "v1,<base64>[ v1,<base64>…]",
// one per key in the given order, each the HMAC-SHA256 keyed with key of
// "<id>.<unix seconds>.<body>".
func StandardWebhooksSignature(keys [][]byte, id string, t time.Time, body []byte) string {
	prefix := id + "." + strconv.FormatInt(t.Unix(), 10) + "."
	sigs := make([]string, 0, len(keys))
	for _, key := range keys {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(prefix))
		mac.Write(body)
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return strings.Join(sigs, " ")
}

// parseWebhookConfig reads {"url": "..."} from config_json. Keys are
// case-sensitive; other keys are ignored (the host may keep its own there).
func parseWebhookConfig(raw json.RawMessage, allowPrivate bool) (*url.URL, error) {
	invalid := func(format string, args ...any) error {
		return &Error{Kind: ConfigInvalid, Message: "config_json.url: " + fmt.Sprintf(format, args...)}
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, &Error{Kind: ConfigInvalid, Message: "config_json is not a JSON object (config_json.url is required)"}
	}
	rawURL, ok := fields["url"]
	if !ok {
		return nil, invalid("missing")
	}
	var s string
	if err := json.Unmarshal(rawURL, &s); err != nil {
		return nil, invalid("not a string")
	}
	if strings.TrimSpace(s) == "" {
		return nil, invalid("empty")
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, invalid("not a valid URL")
	}
	if !u.IsAbs() || u.Host == "" || u.Hostname() == "" {
		return nil, invalid("not an absolute URL")
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, invalid("port %q out of range", port)
		}
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !allowPrivate {
			return nil, invalid("must use https (http is allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS)")
		}
	default:
		return nil, invalid("scheme %q is not http(s)", u.Scheme)
	}
	return u, nil
}

// encodeWebhookBody builds the request body from cmd.
func encodeWebhookBody(cmd PurchaseOrderPush) ([]byte, error) {
	if cmd.ExternalSupplierID == "" {
		return nil, &Error{Kind: PayloadInvalid, Message: "payload_json.externalSupplierId: missing or empty"}
	}
	if cmd.IdempotencyKey == "" {
		return nil, &Error{Kind: PayloadInvalid, Message: "idempotency_key: missing or empty"}
	}
	if len(cmd.PurchaseOrder) == 0 {
		return nil, &Error{Kind: PayloadInvalid, Message: "purchaseOrder: missing"}
	}
	body, err := json.Marshal(webhookBody{CommandType: cmd.CommandType, IdempotencyKey: cmd.IdempotencyKey,
		ExternalSupplierID: cmd.ExternalSupplierID, PurchaseOrder: cmd.PurchaseOrder})
	if err != nil {
		return nil, &Error{Kind: PayloadInvalid, Message: "purchaseOrder: encoding the webhook body", Err: err}
	}
	return body, nil
}

// supplierBody is the request body of a push_supplier command; field order
// is the wire order. Every key is always sent, a field the host did not
// give as "" (addressLines as []): a receiver tells a field the host
// cleared from one it kept, and reads one shape.
type supplierBody struct {
	CommandType    string          `json:"commandType"`
	IdempotencyKey string          `json:"idempotencyKey"`
	Supplier       webhookSupplier `json:"supplier"`
}

type webhookSupplier struct {
	ID           string   `json:"id"`
	Name         string   `json:"name"`
	Email        string   `json:"email"`
	Phone        string   `json:"phone"`
	AddressLines []string `json:"addressLines"`
	City         string   `json:"city"`
	PostalCode   string   `json:"postalCode"`
	Country      string   `json:"country"`
	TaxNumber    string   `json:"taxNumber"`
	CurrencyCode string   `json:"currencyCode"`
	Code         string   `json:"code"`
}

// encodeSupplierBody builds the request body of a supplier push.
func encodeSupplierBody(cmd SupplierPush) ([]byte, error) {
	if cmd.IdempotencyKey == "" {
		return nil, &Error{Kind: PayloadInvalid, Message: "idempotency_key: missing or empty"}
	}
	s := cmd.Supplier
	if s.ID == "" {
		return nil, &Error{Kind: PayloadInvalid, Message: "local_entity_id: missing or empty (the host's supplier id)"}
	}
	if s.Name == "" {
		return nil, &Error{Kind: PayloadInvalid, Message: "payload_json.name: missing or empty"}
	}
	lines := s.AddressLines
	if lines == nil {
		lines = []string{}
	}
	body, err := json.Marshal(supplierBody{CommandType: cmd.CommandType, IdempotencyKey: cmd.IdempotencyKey,
		Supplier: webhookSupplier{ID: s.ID, Name: s.Name, Email: s.Email, Phone: s.Phone, AddressLines: lines, City: s.City,
			PostalCode: s.PostalCode, Country: s.Country, TaxNumber: s.TaxNumber, CurrencyCode: s.CurrencyCode, Code: s.Code}})
	if err != nil {
		return nil, &Error{Kind: PayloadInvalid, Message: "supplier: encoding the webhook body", Err: err}
	}
	return body, nil
}

// interpretResponse maps a webhook's answer to a Result or an *Error.
// requestURL resolves a relative Location; now dates a Retry-After.
func interpretResponse(status int, header http.Header, body []byte, requestURL *url.URL, now time.Time, cred credential.Credential) (Result, error) {
	switch {
	case status == http.StatusAccepted:
		return Result{Status: StatusAccepted, ExternalID: redact(responseID(body), cred), StatusCode: status}, nil
	case status >= 200 && status < 300, status == http.StatusConflict:
		// 409: the provider already has this idempotency key — done.
		return Result{Status: StatusCompleted, ExternalID: redact(responseID(body), cred), StatusCode: status}, nil
	case status >= 300 && status < 400:
		msg := fmt.Sprintf("webhook answered %d: redirect not followed", status)
		if host := locationHost(header.Get("Location"), requestURL); host != "" {
			msg += " (Location host " + host + ")"
		}
		return Result{}, &Error{Kind: Rejected, StatusCode: status, Message: redact(msg, cred)}
	}

	e := &Error{StatusCode: status, Message: fmt.Sprintf("webhook answered %d", status)}
	if quoted := quoteBody(body, cred); quoted != "" {
		e.Message += ": " + quoted
	}
	switch {
	case status == http.StatusRequestTimeout, status == http.StatusTooManyRequests, status >= 500:
		e.Kind = Retryable
		e.RetryAfter = parseRetryAfter(header.Get("Retry-After"), now)
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		e.Kind = Rejected
		e.AuthFailed = true
	case status >= 400:
		e.Kind = Rejected
	default:
		// An unexpected 1xx or a code above 599: not HTTP as we know it.
		e.Kind = Retryable
	}
	return Result{}, e
}

// answersWithID reports whether a response with this status may carry the
// "id" of the provider's record: 2xx and 409.
func answersWithID(status int) bool {
	return status >= 200 && status < 300 || status == http.StatusConflict
}

// maxExternalIDBytes bounds the id kept as provider_reference.
const maxExternalIDBytes = 512

// responseID returns the "id" of a JSON object body: a string, or a number
// as its text. The key is case-sensitive. Anything else, and an id longer
// than maxExternalIDBytes or holding control characters (Postgres text
// cannot store NUL), yields "".
func responseID(body []byte) string {
	id := rawResponseID(body)
	if len(id) > maxExternalIDBytes || strings.ContainsFunc(id, unicode.IsControl) {
		return ""
	}
	return id
}

func rawResponseID(body []byte) string {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return ""
	}
	raw := bytes.TrimSpace(fields["id"])
	if len(raw) == 0 {
		return ""
	}
	switch {
	case raw[0] == '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return ""
		}
		return s
	case raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9':
		var n json.Number
		if json.Unmarshal(raw, &n) != nil {
			return ""
		}
		return n.String()
	}
	return ""
}

// parseRetryAfter reads a Retry-After value: delta-seconds or an HTTP-date.
// It returns 0 when absent, malformed or in the past, and caps the result
// at maxRetryAfter.
func parseRetryAfter(v string, now time.Time) time.Duration {
	return parseRetryAfterUpTo(v, now, maxRetryAfter)
}

// parseRetryAfterUpTo is parseRetryAfter capped at maxRetryAfter instead:
// a daily limit's Retry-After runs up to a day.
func parseRetryAfterUpTo(v string, now time.Time, maxRetryAfter time.Duration) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseUint(v, 10, 64); err == nil {
		if secs > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		d = time.Duration(secs) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

// locationHost returns the host of a redirect's Location, resolved against
// the request URL; never its path or query, which may carry secrets. A host
// that is not short printable ASCII is left out.
func locationHost(location string, requestURL *url.URL) string {
	if location == "" {
		return ""
	}
	loc, err := url.Parse(location)
	if err != nil {
		return ""
	}
	if requestURL != nil {
		loc = requestURL.ResolveReference(loc)
	}
	if len(loc.Host) > 262 { // a 253-byte DNS name, ":" and a port
		return ""
	}
	for _, c := range []byte(loc.Host) {
		if c <= ' ' || c >= 0x7f {
			return ""
		}
	}
	return loc.Host
}

// quoteBody returns at most maxQuotedBody bytes of body as one line of valid
// UTF-8 with the credential's values masked. body may itself be a cut-off
// prefix of the response.
func quoteBody(body []byte, cred credential.Credential) string {
	whole := len(body)
	if len(body) > maxQuotedBody {
		// The end will not be quoted whole: drop a secret's beginning
		// there, which masking cannot recognise, before masking moves text.
		body = trimSecretPrefix(body[:min(len(body), quotePrefixLen(cred))], cred)
	}
	cut := len(body) < whole
	s := redact(strings.ToValidUTF8(string(body), "\uFFFD"), cred)
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' ' // NUL cannot be stored in Postgres text; newlines split log lines
		}
		return r
	}, s)
	if len(s) > maxQuotedBody {
		n := maxQuotedBody
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s, cut = s[:n], true
	}
	s = strings.TrimSpace(s)
	if cut {
		s += "…"
	}
	return s
}

// trimSecretPrefix drops the longest end of b that is the beginning of a
// credential value in one of the forms masking recognises.
func trimSecretPrefix(b []byte, cred credential.Credential) []byte {
	forms := credential.Forms(cred.Values()...)
	for trimmed := true; trimmed; {
		trimmed = false
		for _, v := range forms {
			for k := min(len(v)-1, len(b)); k > 0; k-- {
				if bytes.HasSuffix(b, []byte(v[:k])) {
					b, trimmed = b[:len(b)-k], true
					break
				}
			}
		}
	}
	return b
}

// quotePrefixLen is how much of a body quoteBody needs: the quoted bytes
// plus enough to see the whole of a secret that starts inside them, so that
// it is masked rather than cut.
func quotePrefixLen(cred credential.Credential) int {
	n := maxQuotedBody + utf8.UTFMax
	for _, v := range credential.Forms(cred.Values()...) {
		n = max(n, maxQuotedBody+len(v))
	}
	return n
}

// redact replaces every credential value in s, raw or encoded, by
// "[redacted]" (credential.Mask).
func redact(s string, cred credential.Credential) string {
	return cred.Mask(s)
}

// hideURL rewrites err so that its text names the target by scheme and host
// only, as a redirect's Location is quoted: the path and query of a webhook
// URL often carry a token (hook ids, ?api_key=), and Go's *url.Error quotes
// the whole URL. The result still unwraps to what err wrapped.
func hideURL(err error, target *url.URL) error {
	if err == nil {
		return nil
	}
	origin := target.Scheme + "://" + target.Host
	if ue, ok := err.(*url.Error); ok {
		err = &url.Error{Op: ue.Op, URL: origin, Err: ue.Err}
	}
	// Anything deeper that quotes the URL or its path and query anyway.
	text := strings.ReplaceAll(err.Error(), target.String(), origin)
	if uri := target.RequestURI(); uri != "/" {
		text = strings.ReplaceAll(text, uri, "")
	}
	if target.RawQuery != "" {
		text = strings.ReplaceAll(text, "?"+target.RawQuery, "")
	}
	if text != err.Error() {
		return &redactedError{text: text, err: err}
	}
	return err
}

// classifyTransportError turns a failed http.Client.Do into an *Error: a
// refused non-public target is ConfigInvalid, everything else Retryable.
func classifyTransportError(err error, timeout time.Duration, cred credential.Credential) error {
	var refused *nonPublicAddressError
	switch {
	case errors.As(err, &refused):
		return redactError(&Error{
			Kind:    ConfigInvalid,
			Message: fmt.Sprintf("config_json.url: target resolves to a non-public address (%s), refused", refused.Addr),
			Err:     err,
		}, cred)
	case errors.Is(err, context.DeadlineExceeded):
		return redactError(&Error{
			Kind:    Retryable,
			Message: fmt.Sprintf("webhook: call timed out (limit %s or the caller's deadline)", timeout),
			Err:     err,
		}, cred)
	}
	return redactError(&Error{Kind: Retryable, Message: "webhook: request failed", Err: err}, cred)
}

// redactError masks the credential's values in e's message and in the text
// of its wrapped error, which keeps unwrapping to the original.
func redactError(e *Error, cred credential.Credential) *Error {
	e.Message = redact(e.Message, cred)
	if e.Err != nil {
		if text := redact(e.Err.Error(), cred); text != e.Err.Error() {
			e.Err = &redactedError{text: text, err: e.Err}
		}
	}
	return e
}

// redactedError is an error whose text had secrets masked out.
type redactedError struct {
	text string
	err  error
}

func (e *redactedError) Error() string { return e.text }
func (e *redactedError) Unwrap() error { return e.err }
