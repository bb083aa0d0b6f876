package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"integration-outbox/internal/credential"
)

// AccountingConfig configures the accounting providers (xero, quickbooks).
type AccountingConfig = HTTPConfig

// accountingClient makes the HTTP calls of an accounting provider.
type accountingClient struct {
	name   string // the provider's name, in messages
	cfg    AccountingConfig
	client *http.Client
}

func newAccountingClient(name string, cfg AccountingConfig) accountingClient {
	cfg = cfg.withDefaults()
	return accountingClient{name: name, cfg: cfg, client: cfg.client()}
}

// answer is a provider's HTTP response, its body read up to the cap.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request and reads its answer. configKey names the
// config_json field the URL came from, for a refused non-public target.
// Every failure is an *Error with the credential's values masked.
func (c accountingClient) do(ctx context.Context, method string, target *url.URL, configKey string,
	header http.Header, body []byte, cred credential.Credential) (answer, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout) // keeps an earlier ctx deadline
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target.String(), rd)
	if err != nil {
		return answer{}, &Error{Kind: ConfigInvalid, Message: "config_json." + configKey + ": building request", Err: err}
	}
	req.Header = header
	resp, err := c.client.Do(req)
	if err != nil {
		return answer{}, c.transportError(err, configKey, cred)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxBodyBytes))
	if err != nil {
		// The idempotency key makes a retry safe.
		return answer{}, redactError(&Error{Kind: Retryable, StatusCode: resp.StatusCode,
			Message: fmt.Sprintf("%s: reading the %d response body", c.name, resp.StatusCode), Err: err}, cred)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// transportError classifies a failed http.Client.Do: a refused non-public
// target is ConfigInvalid, everything else (time-outs included) Retryable.
func (c accountingClient) transportError(err error, configKey string, cred credential.Credential) error {
	var refused *nonPublicAddressError
	switch {
	case errors.As(err, &refused):
		return redactError(&Error{Kind: ConfigInvalid, Message: fmt.Sprintf(
			"config_json.%s: target resolves to a non-public address (%s), refused", configKey, refused.Addr), Err: err}, cred)
	case errors.Is(err, context.DeadlineExceeded):
		return redactError(&Error{Kind: Retryable, Message: fmt.Sprintf(
			"%s: call timed out (limit %s or the caller's deadline)", c.name, c.cfg.Timeout), Err: err}, cred)
	}
	return redactError(&Error{Kind: Retryable, Message: c.name + ": request failed", Err: err}, cred)
}

// statusError classifies an HTTP answer that is not a success; detail is
// the provider's own explanation (already extracted from the body) or "",
// in which case the body is quoted. Rate limits pause the connection; 401
// and 403 are AuthFailed, 403 also NeedsReauthorization.
func (c accountingClient) statusError(a answer, detail string, cred credential.Credential) *Error {
	e := &Error{StatusCode: a.status, Message: fmt.Sprintf("%s answered %d", c.name, a.status)}
	if detail == "" {
		detail = quoteBody(a.body, cred)
	}
	if detail != "" {
		e.Message += ": " + detail
	}
	switch s := a.status; {
	case s == http.StatusTooManyRequests:
		e.Kind, e.PauseConnection = Retryable, true
		e.RetryAfter = parseRetryAfter(a.header.Get("Retry-After"), c.cfg.Clock())
	case s == http.StatusRequestTimeout, s >= 500:
		e.Kind = Retryable
		e.RetryAfter = parseRetryAfter(a.header.Get("Retry-After"), c.cfg.Clock())
	case s == http.StatusUnauthorized:
		e.Kind, e.AuthFailed = Rejected, true
	case s == http.StatusForbidden:
		e.Kind, e.AuthFailed, e.NeedsReauthorization = Rejected, true, true
	case s >= 300 && s < 500:
		e.Kind = Rejected
	default:
		e.Kind = Retryable
	}
	return redactError(e, cred)
}
