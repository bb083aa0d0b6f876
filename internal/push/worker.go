// Package push is the worker every command type shares: it consumes an SQS
// batch, starts each job under its claim token, has the command load its
// entities and send each job to the connection's provider, and records the
// results, fenced by the same token. What is particular to a command type
// (its entity, its request, the provider capability it needs) is its
// Command; internal/purchaseorder is push_purchase_order's.
package push

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"golang.org/x/sync/errgroup"

	"integration-outbox/internal/backoff"
	"integration-outbox/internal/config"
	"integration-outbox/internal/credential"
	"integration-outbox/internal/event"
	"integration-outbox/internal/hostschema"
	"integration-outbox/internal/logging"
	"integration-outbox/internal/message"
	"integration-outbox/internal/metrics"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/pace"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/sqlfile"
)

// Store is what the worker needs of the outbox.
type Store interface {
	Start(ctx context.Context, reqs []outbox.StartRequest) ([]outbox.Job, error)
	Record(ctx context.Context, outcomes []outbox.Outcome) (outbox.Recorded, error)
}

// Credentials resolves a connection's credential_reference (for an OAuth2
// secret: to a fresh access token, refreshed across the fleet).
type Credentials interface {
	ResolveConnection(ctx context.Context, conn credential.Connection) (credential.Credential, error)
	Invalidate(reference string)
}

// reauthorizer is what of Credentials records a connection whose grant the
// provider refused in a call (credential.Resolver does; a credential
// source without OAuth2 need not).
type reauthorizer interface {
	NeedsReauthorization(ctx context.Context, conn credential.Connection, why string) (recorded bool, err error)
}

// ReauthorizationRecheck is when a job held because its connection needs
// reauthorization is due again: the claim takes none of the connection's
// rows until the host reconnects it, then they go.
const ReauthorizationRecheck = time.Minute

// Pacer spaces each connection's provider calls across the fleet and pauses
// a connection its provider told to slow down (internal/pace).
type Pacer interface {
	Wait(ctx context.Context, c pace.Connection, perMinute int, maxWait time.Duration) error
	Pause(ctx context.Context, c pace.Connection, until time.Time, reason string) error
	LimitUsedUp(ctx context.Context, c pace.Connection, until time.Time, reason, summary string) (conflictID string, err error)
}

// Command is what one command type brings to the worker.
type Command interface {
	// Type is the command_type it delivers; the worker acknowledges any
	// other message as malformed and leaves any other row unsupported.
	Type() string
	// Supports reports whether p has the capability the command needs; a
	// provider without it leaves the row unsupported.
	Supports(p provider.Provider) bool
	// Load loads what the started jobs need beyond their row and
	// connection (every job it gets is of its Type and has a connection),
	// with one statement for the whole batch, and returns one
	// Delivery per job, in order. An error is the database's: the jobs are
	// retried later.
	Load(ctx context.Context, jobs []outbox.Job) ([]Delivery, error)
}

// Delivery is one loaded job: the provider call that sends it, or why it
// cannot be sent.
type Delivery struct {
	// Send calls p (a provider the command Supports) with the job's
	// request. Every failure should be a *provider.Error.
	Send func(ctx context.Context, p provider.Provider, conn provider.Connection, cred credential.Credential) (provider.Result, error)
	// Check, when set, returns the error Send would return before any
	// call (provider.PurchaseOrderChecker): the worker asks it before it
	// takes a call slot of the connection, so that a job refused without a
	// call uses none.
	Check func(p provider.Provider, conn provider.Connection, cred credential.Credential) error
	// Refusal, when set, ends the job in dead_letter with no provider call:
	// its entity is missing, or its payload can never be sent.
	Refusal *Refusal
	// Wait, when set, sends the job back to the outbox with no provider
	// call, its attempt not charged: it depends on another command that is
	// not delivered yet (a purchase order on its supplier's push).
	Wait *Wait
}

// Wait is a job's dependency on another outbox row.
type Wait struct {
	// For is the id of the outbox row the job waits for: when that row's
	// end is recorded, the job is due at once.
	For string
	// Reason says what the job waits for; it is the row's last_error.
	Reason string
	// Recheck is the latest the job is looked at again should the end of
	// For go unseen (its row dead-lettered by a dispatch run, deleted):
	// WaitRecheck when zero.
	Recheck time.Duration
}

// WaitRecheck is the default Wait.Recheck.
const WaitRecheck = 5 * time.Minute

// Refusal is why a job cannot be sent, whatever is tried again.
type Refusal struct {
	Conflict outbox.ConflictType
	Reason   string
}

// Refuse returns the Delivery of a job that cannot be sent.
func Refuse(conflict outbox.ConflictType, reason string) Delivery {
	return Delivery{Refusal: &Refusal{Conflict: conflict, Reason: reason}}
}

// EventPublisher publishes the events the outbox statements recorded (an
// *event.Publisher).
type EventPublisher interface {
	PublishPending(ctx context.Context) (event.Published, error)
}

// Config configures a Worker.
type Config struct {
	Providers       provider.Registry
	Concurrency     int           // PUSH_CONCURRENCY
	MaxAttempts     int           // MAX_ATTEMPTS
	ProviderTimeout time.Duration // PROVIDER_TIMEOUT
	// RecordReserve is the time kept before the invocation deadline to
	// record results: a provider call is cut off before it (default 3s).
	RecordReserve time.Duration
	Logger        *slog.Logger
	// Jitter returns the retry jitter in [0, 1) (default random).
	Jitter func() float64
	// RetryDelay, when set, replaces backoff.Delay (the overload scenarios
	// scale time down with it).
	RetryDelay func(attempts int, retryAfter time.Duration, jitter float64) time.Duration
	// Events, when set (EVENT_BUS_NAME), publishes right after the record
	// the events it may have written (a command failing or dead-lettered,
	// a connection failing, disabled or unauthorized), so the host hears of
	// them in seconds; the dispatch run publishes whatever this missed.
	Events EventPublisher
	// Metrics receives EMF lines per batch (nil: none).
	Metrics *metrics.Emitter
	// Pacer paces the calls of providers with limits (provider.Limited)
	// and pauses their connections on a 429; nil: neither.
	Pacer Pacer
	// PaceMaxWait is the longest a job waits for its connection's next call
	// slot (default 20s, and never past the time the invocation keeps to
	// call and record); a job that would wait longer goes back to the
	// outbox, due at that slot, its attempt not charged.
	PaceMaxWait time.Duration
}

// DefaultPause is how long a connection pauses after a 429 that did not say
// how long (no Retry-After).
const DefaultPause = time.Minute

// Worker handles SQS batches of one command type's messages.
type Worker struct {
	store Store
	creds Credentials
	cmd   Command
	cfg   Config
}

// New returns a worker that delivers cmd's jobs.
func New(store Store, creds Credentials, cmd Command, cfg Config) (*Worker, error) {
	if len(cfg.Providers) == 0 {
		return nil, errors.New("push: no providers registered")
	}
	if cmd == nil {
		return nil, errors.New("push: no command")
	}
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 10)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, config.DefaultMaxAttempts)
	cfg.ProviderTimeout = cmp.Or(cfg.ProviderTimeout, 10*time.Second)
	cfg.RecordReserve = cmp.Or(cfg.RecordReserve, 3*time.Second)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.PaceMaxWait = cmp.Or(cfg.PaceMaxWait, 20*time.Second)
	if cfg.Jitter == nil {
		cfg.Jitter = backoff.Jitter
	}
	if cfg.RetryDelay == nil {
		cfg.RetryDelay = backoff.Delay
	}
	return &Worker{store: store, creds: creds, cmd: cmd, cfg: cfg}, nil
}

type delivery struct {
	messageID string
	msg       message.Message
}

// Handle processes one SQS batch. Only records that hit an infrastructure
// error (the database could not be reached) are reported as failures, so
// SQS redelivers them; malformed, duplicate and stale deliveries are
// acknowledged.
func (w *Worker) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	log := logging.ForRequest(ctx, w.cfg.Logger)
	resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
	stats := newBatchStats(w.creds)
	defer func() { stats.emit(w.cfg.Metrics, w.creds) }()
	var deliveries []delivery
	for _, rec := range ev.Records {
		m, err := message.Decode(rec.Body)
		if err == nil && m.CommandType != w.cmd.Type() {
			err = fmt.Errorf("message body: commandType: %q is not handled by this function", m.CommandType)
		}
		if err != nil {
			stats.malformed++
			log.WarnContext(ctx, "malformed message acknowledged without processing",
				"messageId", rec.MessageId, "error", err.Error())
			continue
		}
		deliveries = append(deliveries, delivery{messageID: rec.MessageId, msg: m})
	}
	if len(deliveries) == 0 {
		return resp, nil
	}
	fail := func(ds []delivery) {
		for _, d := range ds {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: d.messageID})
		}
	}

	reqs := make([]outbox.StartRequest, len(deliveries))
	leaseUntil := w.leaseUntil(ctx, len(deliveries))
	for i, d := range deliveries {
		reqs[i] = outbox.StartRequest{OutboxID: d.msg.OutboxID, OrganizationID: d.msg.OrganizationID,
			ConnectionID: d.msg.ConnectionID, ClaimToken: d.msg.ClaimToken, LeaseUntil: leaseUntil}
	}
	jobs, err := w.store.Start(ctx, reqs)
	if err != nil {
		stats.schemaError(ctx, log, err)
		log.ErrorContext(ctx, "could not start jobs; records left for redelivery", "count", len(deliveries), "error", err.Error())
		fail(deliveries)
		return resp, nil
	}
	started := make(map[string]outbox.Job, len(jobs))
	for _, j := range jobs {
		started[j.ID] = j
	}
	var toRun []delivery
	taken := make(map[string]bool, len(jobs)) // a message repeated in one batch runs once
	for _, d := range deliveries {
		if _, ok := started[d.msg.OutboxID]; !ok || taken[d.msg.OutboxID] {
			stats.duplicates++
			log.InfoContext(ctx, "duplicate or stale delivery acknowledged: claim not current, already started or its lease expired",
				"messageId", d.messageID, "outboxId", d.msg.OutboxID, "organizationId", d.msg.OrganizationID)
			continue
		}
		taken[d.msg.OutboxID] = true
		toRun = append(toRun, d)
	}

	jobs = make([]outbox.Job, len(toRun))
	for i, d := range toRun {
		jobs[i] = started[d.msg.OutboxID]
	}
	loaded := w.load(ctx, log, jobs)
	results := make([]jobResult, len(jobs))
	g := errgroup.Group{}
	g.SetLimit(w.cfg.Concurrency)
	for i, j := range jobs {
		g.Go(func() error {
			results[i] = w.run(ctx, log, j, loaded[i])
			return nil
		})
	}
	g.Wait()
	recorded, err := w.record(ctx, log, results, stats)
	if err != nil {
		stats.schemaError(ctx, log, err)
		log.ErrorContext(ctx, "could not record results; rows recover when their lease expires",
			"count", len(results), "error", err.Error())
		fail(toRun)
		return resp, nil
	}
	stats.add(results, recorded)
	w.publishEvents(ctx, log, results)
	for _, r := range results {
		if o := r.outcome; !recorded[o.OutboxID] {
			log.WarnContext(ctx, "result not recorded: the claim is no longer current",
				"outboxId", o.OutboxID, "organizationId", o.OrganizationID, "status", o.Status)
		}
	}
	return resp, nil
}

// loaded is a job's Delivery, or why there is none.
type loaded struct {
	Delivery
	// err is the database error that kept the command from loading the
	// job's entity: the job is retried.
	err error
}

// load has the command load the entities of the jobs that can be sent: of
// its type and with a connection (the others end before any call).
func (w *Worker) load(ctx context.Context, log *slog.Logger, jobs []outbox.Job) []loaded {
	out := make([]loaded, len(jobs))
	var sendable []outbox.Job
	var at []int
	for i, j := range jobs {
		if j.CommandType == w.cmd.Type() && j.Connection != nil {
			sendable = append(sendable, j)
			at = append(at, i)
		}
	}
	if len(sendable) == 0 {
		return out
	}
	ds, err := w.cmd.Load(ctx, sendable)
	if err == nil && len(ds) != len(sendable) {
		err = fmt.Errorf("command %s loaded %d deliveries for %d jobs", w.cmd.Type(), len(ds), len(sendable))
	}
	if err != nil {
		if hostschema.IsSchemaError(err) {
			log.ErrorContext(ctx, "a statement failed for a reason of the tables' shape: run outboxctl check",
				"statement", sqlfile.StatementOf(err), "error", err.Error())
		}
		log.ErrorContext(ctx, "could not load the jobs' entities; they are retried", "count", len(sendable), "error", err.Error())
		for _, i := range at {
			out[i].err = err
		}
		return out
	}
	for k, i := range at {
		out[i].Delivery = ds[k]
	}
	return out
}

// leaseUntil is when the pushes of this batch end at the latest, their
// results recorded: the invocation's deadline (provider calls stop
// RecordReserve before it, recording stops at it) plus RecordReserve as a
// margin for the clocks of Lambda and the database. Without a deadline: n
// jobs, Concurrency at a time, each up to two provider calls (a credential
// refresh), then the record.
func (w *Worker) leaseUntil(ctx context.Context, n int) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl.Add(w.cfg.RecordReserve)
	}
	rounds := (n + w.cfg.Concurrency - 1) / w.cfg.Concurrency
	return time.Now().Add(time.Duration(rounds)*2*w.cfg.ProviderTimeout + w.cfg.RecordReserve)
}

// record stores the outcomes, trying a few times within the time left: a
// short database blip should not cost a whole lease.
func (w *Worker) record(ctx context.Context, log *slog.Logger, results []jobResult, stats *batchStats) (map[string]bool, error) {
	outcomes := make([]outbox.Outcome, len(results))
	for i, r := range results {
		outcomes[i] = r.outcome
	}
	rctx := context.WithoutCancel(ctx)
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		rctx, cancel = context.WithDeadline(rctx, dl)
		defer cancel()
	}
	var err error
	for attempt := range 3 {
		var r outbox.Recorded
		if r, err = w.store.Record(rctx, outcomes); err == nil {
			w.partlyRecorded(ctx, log, r, stats)
			out := make(map[string]bool, len(r.IDs))
			for _, id := range r.IDs {
				out[id] = true
			}
			w.circuitChanged(ctx, log, r.Circuits, results, stats)
			return out, nil
		}
		if hostschema.IsSchemaError(err) {
			return nil, err // the same statement fails the same way until the tables change
		}
		select {
		case <-rctx.Done():
			return nil, err
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		}
	}
	return nil, err
}

// partlyRecorded logs a record the host's tables refused as one statement
// (Recorded.Failed): the statement and PostgreSQL's error, each result
// recorded without its conflict, and each not recorded at all (it stays
// under its lease and is retried once the tables are fixed).
func (w *Worker) partlyRecorded(ctx context.Context, log *slog.Logger, r outbox.Recorded, stats *batchStats) {
	if r.Failed == nil {
		return
	}
	stats.schemaError(ctx, log, r.Failed)
	for _, id := range r.Degraded {
		log.ErrorContext(ctx, "result recorded without its conflict and connection health: the host's tables refused them",
			"outboxId", id, "statement", sqlfile.StatementOf(r.Failed))
	}
	for _, f := range r.Refused {
		log.ErrorContext(ctx, "result not recorded: the host's tables refuse it; the row is retried when its lease expires",
			"outboxId", f.ID, "statement", sqlfile.StatementOf(f.Err), "error", f.Err.Error())
	}
}

// circuitChanged logs each circuit transition and counts the openings per
// provider.
func (w *Worker) circuitChanged(ctx context.Context, log *slog.Logger, changes []outbox.CircuitChange,
	results []jobResult, stats *batchStats) {
	for _, c := range changes {
		var org, name string
		for _, r := range results {
			if r.outcome.ConnectionID == c.ConnectionID {
				org, name = r.outcome.OrganizationID, r.provider
				break
			}
		}
		if c.Transition == "closed" {
			log.InfoContext(ctx, "circuit closed: the connection answered again", "connectionId", c.ConnectionID,
				"organizationId", org, "provider", name)
			continue
		}
		stats.circuitOpened(name)
		log.WarnContext(ctx, "circuit "+c.Transition+": the connection's rows are held back until the cooldown ends",
			"connectionId", c.ConnectionID, "organizationId", org, "provider", name,
			"openUntil", c.OpenUntil.UTC().Format(time.RFC3339Nano))
	}
}

// jobResult is what running one job produced.
type jobResult struct {
	outcome  outbox.Outcome
	provider string        // the connection's provider, when known
	latency  time.Duration // of the provider call(s); 0 when none was made
}

// run delivers one started job and returns its outcome; it never fails.
func (w *Worker) run(ctx context.Context, base *slog.Logger, job outbox.Job, ld loaded) jobResult {
	// The job's fields go on each line rather than through Logger.With, which
	// would format them for every job whether anything is logged or not.
	log := jobLogger{log: base, attrs: []slog.Attr{slog.String("outboxId", job.ID),
		slog.String("organizationId", job.OrganizationID), slog.Int("attempt", job.AttemptCount)}}
	began := time.Now()
	var res jobResult
	if job.Connection != nil {
		res.provider = job.Connection.Provider
	}
	o, secrets := w.deliver(ctx, log, job, ld, &res.latency)
	o.OutboxID, o.OrganizationID, o.ConnectionID, o.ClaimToken = job.ID, job.OrganizationID, job.ConnectionID, job.ClaimToken
	if job.Connection != nil {
		o.LocationID = job.Connection.LocationID
	}
	o.LastError = cleanError(o.LastError, secrets)
	o.ConflictSummary = cleanError(o.ConflictSummary, secrets)
	level := slog.LevelInfo
	if (o.Status == outbox.StatusFailed && o.WaitingFor == "") || o.Status == outbox.StatusDeadLetter {
		level = slog.LevelWarn
	}
	log.logAttrs(ctx, level, "job finished", slog.String("provider", res.provider), slog.String("status", string(o.Status)), slog.String("providerStatus", o.ProviderStatus),
		slog.String("providerReference", o.ProviderReference), slog.String("conflictType", string(o.ConflictType)),
		slog.String("error", o.LastError), slog.Float64("retryInSeconds", o.RetryIn.Seconds()), slog.String("waitingFor", o.WaitingFor),
		slog.Int64("durationMs", time.Since(began).Milliseconds()))
	res.outcome = o
	return res
}

// jobLogger logs lines about one job, each with the job's fields.
type jobLogger struct {
	log   *slog.Logger
	attrs []slog.Attr
}

func (l jobLogger) logAttrs(ctx context.Context, level slog.Level, msg string, attrs ...slog.Attr) {
	if !l.log.Enabled(ctx, level) {
		return
	}
	l.log.LogAttrs(ctx, level, msg, append(l.attrs[:len(l.attrs):len(l.attrs)], attrs...)...)
}

// ready checks what a job needs before its credential and any call: the
// command's type, the connection, a provider that takes the command, the
// command's entity loaded, no refusal or wait, a key that can be sent, a
// request, and a connection that needs no reauthorization. It returns the provider and the job's connection as the
// provider sees it, or the outcome that ends the job without a call.
func (w *Worker) ready(job outbox.Job, ld loaded) (provider.Provider, provider.Connection, *outbox.Outcome) {
	end := func(o outbox.Outcome) (provider.Provider, provider.Connection, *outbox.Outcome) {
		return nil, provider.Connection{}, &o
	}
	if job.CommandType != w.cmd.Type() {
		return end(unsupported(fmt.Sprintf("unsupported command type %q", job.CommandType)))
	}
	conn := job.Connection
	if conn == nil {
		return end(permanent(job, outbox.ConflictConfigurationInvalid, fmt.Sprintf(
			"integration connection %s not found for the organization", job.ConnectionID)))
	}
	p, err := w.cfg.Providers.Get(conn.Provider)
	if errors.Is(err, provider.ErrProviderOff) {
		return end(unsupported(err.Error()))
	}
	if err != nil {
		return end(unsupported(fmt.Sprintf("provider %q is not supported", conn.Provider)))
	}
	if !w.cmd.Supports(p) {
		return end(unsupported(fmt.Sprintf("provider %q cannot take %s", conn.Provider, job.CommandType)))
	}
	if ld.err != nil {
		return end(w.retryable(job, fmt.Sprintf("loading the command's entity: %v", ld.err), 0))
	}
	if r := ld.Refusal; r != nil {
		return end(permanent(job, r.Conflict, r.Reason))
	}
	if wt := ld.Wait; wt != nil {
		o := uncharged(wt.Reason, cmp.Or(wt.Recheck, WaitRecheck))
		o.WaitingFor = wt.For
		return end(o)
	}
	if err := checkIdempotencyKey(job.IdempotencyKey); err != nil {
		return end(permanent(job, outbox.ConflictPayloadInvalid, err.Error()))
	}
	if ld.Send == nil {
		return end(permanent(job, outbox.ConflictPayloadInvalid, fmt.Sprintf("command %s gave no request to send", job.CommandType)))
	}
	if conn.Unauthorized != "" {
		// Marked after this job was claimed: no call, no token call.
		return end(heldForReauthorization(&pace.Unauthorized{Reason: conn.Unauthorized}))
	}
	return p, provider.Connection{ID: conn.ID, OrganizationID: job.OrganizationID, LocationID: conn.LocationID,
		Provider: conn.Provider, Config: conn.Config}, nil
}

// deliver does the work of one job. It returns the outcome and the secret
// values that must not appear in any text it stores.
func (w *Worker) deliver(ctx context.Context, log jobLogger, job outbox.Job, ld loaded, latency *time.Duration) (outbox.Outcome, []string) {
	p, pconn, ended := w.ready(job, ld)
	if ended != nil {
		return *ended, nil
	}
	conn := job.Connection
	var (
		cred   credential.Credential
		err    error
		called bool
		first  time.Time // of the first provider call of this attempt
	)
	cconn := credential.Connection{ID: conn.ID, OrganizationID: job.OrganizationID,
		Provider: conn.Provider, Config: conn.Config, Reference: conn.CredentialReference}
	// resolve takes the connection's credential; a non-nil outcome ends
	// the job without a call.
	resolve := func() *outbox.Outcome {
		if conn.CredentialReference == "" {
			return nil
		}
		var o outbox.Outcome
		switch cred, err = w.resolve(ctx, cconn); {
		case err == nil:
			return nil
		case errors.Is(err, credential.ErrRejected):
			o = permanent(job, outbox.ConflictCredentialRejected, err.Error())
		case errors.Is(err, credential.ErrReauthorizationNeeded):
			o = heldForReauthorization(err)
		default:
			o = w.retryable(job, err.Error(), 0)
		}
		return &o
	}
	for refreshed := false; ; refreshed = true {
		if o := resolve(); o != nil {
			return *o, nil
		}
		if ld.Check != nil {
			if err := ld.Check(p, pconn, cred); err != nil {
				return w.outcome(job, provider.Result{}, err), cred.Values()
			}
		}
		paced, err := w.pace(ctx, p, pconn)
		if err != nil {
			if o, held := paceHeld(ctx, log, err); held {
				return o, cred.Values()
			}
			return w.retryable(job, err.Error(), 0), cred.Values()
		}
		if paced {
			// The credential is taken again after the wait for the call
			// slot, right before the call: an access token that came near
			// its expiry meanwhile is refreshed here rather than answered
			// 401 (otherwise it is a hit of the resolver's cache).
			stale := cred.Values()
			if o := resolve(); o != nil {
				return *o, append(stale, cred.Values()...)
			}
		}
		callStart := time.Now()
		// On a paced connection, a call of the push beyond its first (a
		// look-up's create) waits for its own slot.
		callCtx := ctx
		if paced {
			callCtx = provider.WithCallGate(ctx, func(ctx context.Context) error {
				_, err := w.pace(ctx, p, pconn)
				return err
			})
		}
		res, made, err := w.call(callCtx, p, pconn, cred, ld.Send)
		*latency += time.Since(callStart)
		if made && !called {
			called, first = true, callStart
		}
		var perr *provider.Error
		if errors.As(err, &perr) && perr.AuthFailed && !refreshed && conn.CredentialReference != "" {
			log.logAttrs(ctx, slog.LevelInfo, "provider refused the credential; refreshing it once", slog.Int("statusCode", perr.StatusCode))
			w.creds.Invalidate(conn.CredentialReference)
			continue
		}
		o := w.outcome(job, res, err)
		if held, ok := paceHeld(ctx, log, err); ok {
			o = held
		}
		switch {
		case perr != nil && perr.PauseConnection:
			o = w.pause(ctx, log, pconn, perr, err)
		case perr != nil && perr.NeedsReauthorization && refreshed:
			// Refused again with a fresh token: the grant itself is gone.
			if ra, ok := w.creds.(reauthorizer); ok {
				recorded, rerr := ra.NeedsReauthorization(ctx, cconn, perr.Message)
				if rerr != nil {
					log.logAttrs(ctx, slog.LevelWarn, "could not record that the connection needs reauthorization",
						slog.String("error", rerr.Error()))
				}
				if recorded {
					o = heldForReauthorization(err)
				}
			}
		}
		if called {
			o.ProviderCalled, o.CallStartedAt, o.CallFinishedAt = true, first, time.Now()
			o.HTTPStatus = res.StatusCode
			if perr != nil {
				o.HTTPStatus, o.OutcomeUnknown = perr.StatusCode, perr.OutcomeUnknown
			}
		}
		if !o.Uncharged {
			o.Circuit = circuitSignal(err)
		}
		return o, cred.Values()
	}
}

// paceHeld is the outcome of a job the connection's pace held (err is a
// *pace.Unauthorized or a *pace.Busy, before the call or between two calls
// of one push): back to the outbox, its attempt not charged. ok is false
// for any other err.
func paceHeld(ctx context.Context, log jobLogger, err error) (_ outbox.Outcome, ok bool) {
	var (
		busy         *pace.Busy
		unauthorized *pace.Unauthorized
	)
	switch {
	case errors.As(err, &unauthorized):
		log.logAttrs(ctx, slog.LevelInfo, "the connection needs reauthorization: the job is held without a call, its attempt not charged")
		return heldForReauthorization(err), true
	case errors.As(err, &busy):
		log.logAttrs(ctx, slog.LevelInfo, "connection busy: the job goes back to the outbox, its attempt not charged",
			slog.Time("until", busy.Until), slog.Bool("paused", busy.Paused))
		return uncharged(busy.Error(), max(time.Until(busy.Until), 0)), true
	}
	return outbox.Outcome{}, false
}

// uncharged sends a job back to the outbox, due after retryIn, its attempt
// given back: what kept it from the provider is its connection's (a pause,
// the pace, a refused grant), not the command's.
func uncharged(text string, retryIn time.Duration) outbox.Outcome {
	return outbox.Outcome{Status: outbox.StatusFailed, LastError: text, RetryIn: retryIn, Uncharged: true}
}

// heldForReauthorization sends a job back to the outbox, its attempt not
// charged: its connection needs reauthorization, and the claim holds its
// rows until the host reconnects it.
func heldForReauthorization(err error) outbox.Outcome {
	return uncharged(err.Error(), ReauthorizationRecheck)
}

// pace waits for the connection's next call slot where p limits its
// connections' calls (paced: it did); a *pace.Busy says the job should
// come back later, a *pace.Unauthorized that the connection needs
// reauthorization.
func (w *Worker) pace(ctx context.Context, p provider.Provider, conn provider.Connection) (paced bool, _ error) {
	lp, ok := p.(provider.Limited)
	if !ok || w.cfg.Pacer == nil {
		return false, nil
	}
	maxWait := w.cfg.PaceMaxWait
	if dl, ok := ctx.Deadline(); ok {
		maxWait = min(maxWait, time.Until(dl)-w.cfg.RecordReserve-w.cfg.ProviderTimeout)
	}
	return true, w.cfg.Pacer.Wait(ctx, pace.Connection{ID: conn.ID, OrganizationID: conn.OrganizationID},
		lp.Limits(conn).CallsPerMinute, max(maxWait, 0))
}

// pause stops every container's calls to the connection until the
// provider's Retry-After (DefaultPause when it gave none) and sends the job
// back to the outbox for then, its attempt not charged.
func (w *Worker) pause(ctx context.Context, log jobLogger, conn provider.Connection, perr *provider.Error, err error) outbox.Outcome {
	wait := cmp.Or(perr.RetryAfter, DefaultPause)
	if w.cfg.Pacer != nil {
		c := pace.Connection{ID: conn.ID, OrganizationID: conn.OrganizationID}
		until := time.Now().Add(wait)
		var pauseErr error
		if perr.DailyLimit {
			var conflictID string
			conflictID, pauseErr = w.cfg.Pacer.LimitUsedUp(ctx, c, until, perr.Message, dailyLimitSummary(conn.Provider, until))
			if conflictID != "" {
				log.logAttrs(ctx, slog.LevelWarn, "the provider's daily limit of the connection is used up: it is paused until the limit resets",
					slog.Time("until", until), slog.String("conflictId", conflictID))
			}
		} else {
			pauseErr = w.cfg.Pacer.Pause(ctx, c, until, perr.Message)
		}
		if pauseErr != nil {
			log.logAttrs(ctx, slog.LevelWarn, "could not pause the connection; its other rows may call the provider before the pause ends",
				slog.String("error", pauseErr.Error()))
		}
	}
	log.logAttrs(ctx, slog.LevelInfo, "the provider paused the connection", slog.Duration("for", wait))
	return uncharged(err.Error(), wait)
}

// publishEvents publishes the pending events when the batch's record may
// have written some: any result other than a delivery (a retry, a
// dead letter, a held row). A batch of deliveries only writes Connection
// Recovered after a failing period, which the next dispatch run publishes.
// At least once: an event published here and not marked is sent again.
func (w *Worker) publishEvents(ctx context.Context, log *slog.Logger, results []jobResult) {
	if w.cfg.Events == nil {
		return
	}
	wrote := false
	for _, r := range results {
		switch r.outcome.Status {
		case outbox.StatusFailed, outbox.StatusDeadLetter:
			wrote = true
		}
	}
	if !wrote {
		return
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), eventPublishTimeout)
	if dl, ok := ctx.Deadline(); ok {
		cancel()
		pctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), dl)
	}
	defer cancel()
	p, err := w.cfg.Events.PublishPending(pctx)
	if err != nil {
		log.WarnContext(ctx, "publishing events failed; the next dispatch run sends them", "published", p.Sent, "error", err.Error())
		return
	}
	if p.Sent > 0 {
		log.InfoContext(ctx, "events published", "count", p.Sent)
	}
}

// eventPublishTimeout bounds the publish after a batch without a deadline.
const eventPublishTimeout = 5 * time.Second

// dailyLimitSummary is the connection_limit_reached conflict's summary.
func dailyLimitSummary(providerName string, until time.Time) string {
	name := map[string]string{"xero": "Xero", "quickbooks": "QuickBooks Online"}[providerName]
	return fmt.Sprintf("%s's daily limit is used up until %s: the connection's commands wait, no attempt used, and go on by themselves then.",
		cmp.Or(name, providerName), until.UTC().Format("2006-01-02 15:04 MST"))
}

// errNoTimeLeft is a provider call that was not made: the invocation had no
// time left for it. It says nothing about the connection.
var errNoTimeLeft = errors.New("not enough time left in this invocation to call the provider")

// circuitSignal is what a provider call tells the connection's circuit
// breaker: any answer of the provider (even a rejection) shows that the
// connection works; a retryable failure counts against it.
func circuitSignal(err error) string {
	var perr *provider.Error
	switch {
	case err == nil:
		return outbox.CircuitSuccess
	case errors.Is(err, errNoTimeLeft):
		return ""
	case !errors.As(err, &perr) || perr.Kind == provider.Retryable:
		return outbox.CircuitFailure
	case perr.Kind == provider.Rejected:
		return outbox.CircuitSuccess
	}
	return ""
}

type sendFunc = func(ctx context.Context, p provider.Provider, conn provider.Connection, cred credential.Credential) (provider.Result, error)

// call runs the provider call under PROVIDER_TIMEOUT, cut so that the
// result can still be recorded before the invocation's deadline. made is
// false when no time was left to call at all.
func (w *Worker) call(ctx context.Context, p provider.Provider, conn provider.Connection,
	cred credential.Credential, send sendFunc) (_ provider.Result, made bool, _ error) {
	deadline := time.Now().Add(w.cfg.ProviderTimeout)
	if dl, ok := ctx.Deadline(); ok {
		if cut := dl.Add(-w.cfg.RecordReserve); cut.Before(deadline) {
			deadline = cut
		}
	}
	if !deadline.After(time.Now()) {
		return provider.Result{}, false, &provider.Error{Kind: provider.Retryable,
			Message: "provider not called", Err: errNoTimeLeft}
	}
	cctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	res, err := send(cctx, p, conn, cred)
	if err != nil && cctx.Err() != nil && ctx.Err() == nil {
		var perr *provider.Error
		if !errors.As(err, &perr) {
			err = &provider.Error{Kind: provider.Retryable, Message: "provider call timed out", Err: err}
		}
	}
	return res, true, err
}

// resolve looks the credential up, cut like a provider call: a Secrets
// Manager that hangs must not eat the time kept to record the result.
func (w *Worker) resolve(ctx context.Context, conn credential.Connection) (credential.Credential, error) {
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-w.cfg.RecordReserve))
		defer cancel()
	}
	return w.creds.ResolveConnection(ctx, conn)
}

// outcome maps a provider's answer to the row's next state (docs/architecture.md,
// Rules: provider result mapping).
func (w *Worker) outcome(job outbox.Job, res provider.Result, err error) outbox.Outcome {
	if err == nil {
		o := outbox.Outcome{ProviderReference: res.ExternalID, ProviderStatus: res.Status}
		switch res.Status {
		case provider.StatusCompleted:
			o.Status = outbox.StatusCompleted
			o.ProviderStatus = cmp.Or(res.Action, res.Status)
		case provider.StatusUncertain:
			o.Status = outbox.StatusUncertain
		default: // accepted, or any other not-yet-done answer
			o.Status = outbox.StatusProcessing
			o.ProviderStatus = cmp.Or(res.Status, provider.StatusAccepted)
			o.RetryIn = AcceptedFollowUp
		}
		return o
	}
	var perr *provider.Error
	if !errors.As(err, &perr) {
		return w.retryable(job, err.Error(), 0)
	}
	var o outbox.Outcome
	switch perr.Kind {
	case provider.Rejected:
		o = permanent(job, outbox.ConflictProviderRejected, err.Error())
	case provider.ConfigInvalid:
		o = permanent(job, outbox.ConflictConfigurationInvalid, err.Error())
	case provider.PayloadInvalid:
		o = permanent(job, outbox.ConflictPayloadInvalid, err.Error())
	case provider.Duplicate:
		o = permanent(job, outbox.ConflictProviderDuplicate, err.Error())
	default:
		o = w.retryable(job, err.Error(), perr.RetryAfter)
	}
	if perr.OutcomeUnknown && o.Status == outbox.StatusDeadLetter {
		// The last attempt may have made the document: a person should
		// know before creating it by hand, and a rerun looks it up.
		o.LastError = MayExistAtProvider + ": " + o.LastError
		o.ConflictSummary = fmt.Sprintf("%s reached dead letter (%s): %s", job.CommandType, o.ConflictType, o.LastError)
	}
	return o
}

// MayExistAtProvider begins the last_error and conflict summary of a row
// dead-lettered after an attempt whose outcome is unknown.
const MayExistAtProvider = "may exist at the provider: rerun looks it up first"

// retryable schedules the next attempt, or dead-letters the row when its
// attempts are exhausted.
func (w *Worker) retryable(job outbox.Job, text string, retryAfter time.Duration) outbox.Outcome {
	if job.AttemptCount >= w.cfg.MaxAttempts {
		o := permanent(job, outbox.ConflictProviderRejected, fmt.Sprintf("attempts exhausted (%d of %d): %s",
			job.AttemptCount, w.cfg.MaxAttempts, text))
		return o
	}
	return outbox.Outcome{Status: outbox.StatusFailed, LastError: text,
		RetryIn: w.cfg.RetryDelay(job.AttemptCount, retryAfter, w.cfg.Jitter())}
}

// AcceptedFollowUp is how long a command the provider accepted but did not
// complete waits before it is pushed again with the same idempotency key, so
// that the provider can answer that it is done (200/409) or still working
// (202). Each follow-up is an attempt; when none are left the row goes to
// dead_letter. The row has no lease meanwhile.
const AcceptedFollowUp = time.Hour

// permanent ends the job in dead_letter with a conflict of type conflict.
func permanent(job outbox.Job, conflict outbox.ConflictType, text string) outbox.Outcome {
	return outbox.Outcome{Status: outbox.StatusDeadLetter, LastError: text, ConflictType: conflict,
		ConflictSummary: fmt.Sprintf("%s reached dead letter (%s): %s", job.CommandType, conflict, text)}
}

func unsupported(text string) outbox.Outcome {
	return outbox.Outcome{Status: outbox.StatusUnsupported, LastError: text}
}
