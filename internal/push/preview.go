package push

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/provider"
)

// Redacted replaces, in a preview, every secret and the Authorization
// value.
const Redacted = "<redacted>"

// Preview is what the push of one row would do now, worked out without
// doing it: the request it would send (Request), or the refusal it would
// record before any call (Refusal), or why it would send nothing yet
// (Held), or, for a provider that makes no HTTP call, a Note.
type Preview struct {
	Provider string
	Request  *PreviewRequest
	Refusal  *PreviewRefusal
	Held     *PreviewHeld
	Note     string
}

// PreviewRequest is the first request the push would send.
type PreviewRequest struct {
	Method  string
	URL     string
	Headers map[string]string
	// Body is the JSON document sent; a body that is not JSON is given as
	// a JSON string, and a request without one as null.
	Body json.RawMessage
}

// PreviewRefusal is the conflict the push would record with no call.
type PreviewRefusal struct {
	ConflictType string `json:"conflictType"`
	Message      string `json:"message"`
}

// PreviewHeld is why the push would send nothing now and give the row
// back, its attempt not charged (a supplier still to be pushed, a
// connection needing reauthorization).
type PreviewHeld struct {
	Message    string `json:"message"`
	WaitingFor string `json:"waitingFor,omitempty"`
}

// MarshalJSON gives the contract's shape: {"provider", "method", "url",
// "headers", "body"} for a request, {"refusal": {"conflictType",
// "message"}} for a refusal (with "provider" when known).
func (p Preview) MarshalJSON() ([]byte, error) {
	out := map[string]any{}
	if p.Provider != "" {
		out["provider"] = p.Provider
	}
	if r := p.Request; r != nil {
		body := r.Body
		if len(body) == 0 {
			body = json.RawMessage("null")
		}
		out["method"], out["url"], out["headers"], out["body"] = r.Method, r.URL, r.Headers, body
	}
	if p.Refusal != nil {
		out["refusal"] = p.Refusal
	}
	if p.Held != nil {
		out["held"] = p.Held
	}
	if p.Note != "" {
		out["note"] = p.Note
	}
	return json.Marshal(out)
}

// PreviewTransport is the transport of the providers a preview worker
// holds (provider.AccountingConfig.Transport, WebhookConfig.Transport): it
// keeps the request a preview's call makes and sends nothing, ever.
func PreviewTransport() http.RoundTripper { return previewTransport{} }

type previewTransport struct{}

// captureKey carries a preview's *capture in the call's context.
type captureKey struct{}

// capture is the first request of a preview's call.
type capture struct {
	req  *http.Request
	body []byte
}

// errCaptured ends a preview's call at its first request.
var errCaptured = errors.New("preview: the request was kept, not sent")

func (previewTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body.Close()
	}
	c, _ := r.Context().Value(captureKey{}).(*capture)
	if c == nil {
		return nil, errors.New("push: the preview transport sends nothing, and was used outside a preview")
	}
	if c.req == nil {
		c.req, c.body = r, body
	}
	return nil, errCaptured
}

// previewCredential stands for the connection's credential in a preview:
// the secret is not read (no Secrets Manager call, no token refresh), so
// every header a credential can add is there, its value redacted.
func previewCredential(conn *outbox.Connection) credential.Credential {
	if conn.CredentialReference == "" {
		return credential.Credential{}
	}
	return credential.Credential{Token: credential.NewSecret("preview-access-token"),
		SigningSecret: credential.NewSecret("preview-signing-secret")}
}

// Preview works out what the push of job would do now, as deliver would,
// without a credential read, a provider call or a write: the worker's
// providers must send through PreviewTransport, and its command should
// read through a read-only transaction. An error is the database's.
func (w *Worker) Preview(ctx context.Context, job outbox.Job) (Preview, error) {
	quiet := slog.New(slog.DiscardHandler)
	ld := w.load(ctx, quiet, []outbox.Job{job})[0]
	if ld.err != nil {
		return Preview{}, ld.err
	}
	var pv Preview
	if job.Connection != nil {
		pv.Provider = job.Connection.Provider
	}
	p, pconn, ended := w.ready(job, ld)
	if ended != nil {
		return previewEnded(pv, *ended), nil
	}
	cred := previewCredential(job.Connection)
	if ld.Check != nil {
		if err := ld.Check(p, pconn, cred); err != nil {
			return previewEnded(pv, w.outcome(job, provider.Result{}, err)), nil
		}
	}
	if p.Name() == provider.NameSandbox {
		pv.Note = "the sandbox provider sends no request: the push would record the row completed"
		return pv, nil
	}
	c := &capture{}
	cctx, cancel := context.WithTimeout(context.WithValue(ctx, captureKey{}, c), w.cfg.ProviderTimeout)
	defer cancel()
	_, err := ld.Send(cctx, p, pconn, cred)
	if c.req == nil {
		if err == nil {
			return pv, fmt.Errorf("preview of %s: the %s provider answered without a request", job.ID, pconn.Provider)
		}
		return previewEnded(pv, w.outcome(job, provider.Result{}, err)), nil
	}
	pv.Request = previewRequest(c, cred.Values())
	if !job.UnknownSince.IsZero() && c.req.Method == http.MethodGet {
		pv.Note = fmt.Sprintf("an earlier attempt (started %s) may have made the document without our hearing of it: "+
			"the push looks it up first (this request); found, the row completes with it (reconciled), "+
			"none found, the create follows, two or more, the row goes to a person (provider_duplicate)",
			job.UnknownSince.UTC().Format(time.RFC3339))
	}
	return pv, nil
}

// previewEnded is the preview of a job that ends without a call.
func previewEnded(pv Preview, o outbox.Outcome) Preview {
	switch {
	case o.Status == outbox.StatusDeadLetter:
		pv.Refusal = &PreviewRefusal{ConflictType: string(o.ConflictType), Message: o.LastError}
	case o.Status == outbox.StatusUnsupported:
		pv.Refusal = &PreviewRefusal{ConflictType: string(outbox.StatusUnsupported), Message: o.LastError}
	default:
		pv.Held = &PreviewHeld{Message: o.LastError, WaitingFor: o.WaitingFor}
	}
	return pv
}

// previewRequest is the kept request with the Authorization value, the
// signatures and every secret value redacted.
func previewRequest(c *capture, secrets []string) *PreviewRequest {
	hide := func(s string) string { return credential.Mask(s, secrets...) }
	r := &PreviewRequest{Method: c.req.Method, URL: hide(c.req.URL.String()), Headers: map[string]string{}}
	for name, values := range c.req.Header {
		v := strings.Join(values, ", ")
		if name == "Authorization" || strings.Contains(strings.ToLower(name), "signature") ||
			slices.ContainsFunc(secrets, func(s string) bool { return strings.Contains(v, s) }) {
			v = Redacted
		}
		r.Headers[name] = v
	}
	body := []byte(hide(string(c.body)))
	switch {
	case len(bytes.TrimSpace(body)) == 0:
	case json.Valid(body):
		r.Body = body
	default:
		r.Body, _ = json.Marshal(string(body))
	}
	return r
}

// Previewer previews rows of the command types it has commands for.
type Previewer struct {
	cfg      Config
	commands map[string]func(tx pgx.Tx) Command
}

// NewPreviewer returns a previewer whose workers have cfg, whose
// Providers must send through PreviewTransport, and whose commands, by
// command type, read through the preview's read-only transaction.
func NewPreviewer(cfg Config, commands map[string]func(tx pgx.Tx) Command) *Previewer {
	return &Previewer{cfg: cfg, commands: commands}
}

// Preview previews the organization's row outboxID, read in tx (which
// should be read-only): outbox.ErrNotFound when the organization has no
// such row.
func (pr *Previewer) Preview(ctx context.Context, tx pgx.Tx, organizationID, outboxID string) (Preview, error) {
	job, err := outbox.Peek(ctx, tx, organizationID, outboxID)
	if err != nil {
		return Preview{}, err
	}
	mk, ok := pr.commands[job.CommandType]
	if !ok {
		pv := previewEnded(Preview{}, unsupported(fmt.Sprintf("unsupported command type %q: no function delivers it", job.CommandType)))
		if job.Connection != nil {
			pv.Provider = job.Connection.Provider
		}
		return pv, nil
	}
	w, err := New(nil, nil, mk(tx), pr.cfg)
	if err != nil {
		return Preview{}, err
	}
	return w.Preview(ctx, job)
}
