// Package dispatch claims due outbox rows in batches and fans out one SQS
// message per command to the queue its command type routes to.
package dispatch

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"golang.org/x/sync/errgroup"

	"integration-outbox/internal/config"
	"integration-outbox/internal/event"
	"integration-outbox/internal/health"
	"integration-outbox/internal/hostschema"
	"integration-outbox/internal/logging"
	"integration-outbox/internal/message"
	"integration-outbox/internal/metrics"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/sqlfile"
)

// Store is what the dispatcher needs of the outbox.
type Store interface {
	Idle(ctx context.Context, p outbox.ClaimParams) (bool, error)
	Sweep(ctx context.Context, p outbox.ClaimParams) (outbox.Sweep, error)
	ClaimBatch(ctx context.Context, p outbox.ClaimParams) (outbox.Batch, error)
	Release(ctx context.Context, claims []outbox.Claim) (int, error)
	Hold(ctx context.Context, claims []outbox.Claim, reason string, delay time.Duration) (int, error)
	MarkUnsupported(ctx context.Context, claims []outbox.Claim, reason string) (int, error)
	DeadLetterNoConnection(ctx context.Context, claims []outbox.Claim) (int, error)
}

// Sender sends message batches (an *sqs.Client).
type Sender interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// EventPublisher publishes the pending events (an *event.Publisher).
type EventPublisher interface {
	PublishPending(ctx context.Context) (event.Published, error)
}

// Routes maps a command type to the URL of the queue its function consumes.
// Adding a command type is one entry here (plus its function and queue).
// An empty URL is a command type this deployment knows but has no queue
// for (its variable unset): its rows are held (HeldRecheck), not ended.
type Routes map[string]string

// HeldRecheck is how long a row whose command type has no queue configured
// waits before it is claimed again: the attempt is given back and its
// last_error names the missing setting.
const HeldRecheck = 15 * time.Minute

// Reconnections resumes the connections the host reconnected.
type Reconnections interface {
	CheckReauthorized(ctx context.Context) (resumed int, err error)
}

// LimitResets resolves the daily limit conflicts of the connections whose
// pause has ended (pace.Pacer.ResolveEndedLimits).
type LimitResets interface {
	ResolveEndedLimits(ctx context.Context) (int64, error)
}

// Config configures a Dispatcher.
type Config struct {
	Routes      Routes
	BatchSize   int           // CLAIM_BATCH_SIZE
	MaxPerRun   int           // DISPATCH_MAX_PER_RUN
	MaxAttempts int           // MAX_ATTEMPTS
	Lease       time.Duration // LEASE_SECONDS
	// MaxInFlight caps the leased rows across all organizations
	// (DISPATCH_MAX_IN_FLIGHT; 0: no cap).
	MaxInFlight int
	// ConnectionMaxInFlight caps the leased rows of one connection unless
	// its config_json.maxInFlight says otherwise (CONNECTION_MAX_IN_FLIGHT;
	// 0: no cap).
	ConnectionMaxInFlight int
	// ProviderMaxInFlight caps the leased rows of a connection of the
	// provider it names (provider.Registry.MaxInFlightDefaults) unless its
	// config_json.maxInFlight says otherwise; it wins over
	// ConnectionMaxInFlight.
	ProviderMaxInFlight map[string]int
	// Reconnections, when set, resumes the connections whose OAuth2 grant
	// was refused and whose secret the host has since replaced
	// (credential.Resolver.CheckReauthorized), once per run before it
	// claims.
	Reconnections Reconnections
	// LimitResets, when set, resolves once per run the
	// connection_limit_reached conflicts of connections whose provider's
	// daily limit has reset (their pause ended).
	LimitResets LimitResets
	// RoomWait is how long a run waits before claiming again when an
	// in-flight cap held due rows back (rows in flight finish and make
	// room), when a row it sent has due commands of its entity behind it
	// (its result frees the next), or when a row it sent is of a
	// Prerequisites type (its end makes the commands waiting for it due).
	// 0, or a context without a deadline: the run ends instead.
	RoomWait time.Duration
	// Prerequisites are the command types other commands may wait for
	// (push_supplier: the purchase orders of its supplier). A run that sent
	// one keeps claiming every RoomWait while it is in flight and a command
	// waits for it, so that the commands that waited for it go in the same
	// run, not the next.
	Prerequisites []string
	// Reserve is the time left before the invocation's deadline at which a
	// run stops claiming (default 10s).
	Reserve time.Duration
	Logger  *slog.Logger
	// Metrics receives one EMF line per run (nil: none).
	Metrics *metrics.Emitter
	// Events, when set (EVENT_BUS_NAME), publishes the pending events at
	// the end of each run: those the run's own statements wrote and those
	// a push or an earlier publish left.
	Events EventPublisher
	// ConnectionCounts, when set, counts the connections that are
	// disabled, unauthorized and failing, for the run's metrics.
	ConnectionCounts func(ctx context.Context) (health.Counts, error)
}

// Dispatcher runs dispatch invocations.
type Dispatcher struct {
	store  Store
	sender Sender
	cfg    Config

	mu sync.Mutex
	// after is where the next claim's walk over organizations starts: each
	// claim continues after the last organization the previous one served,
	// so that with more organizations than a batch holds all get their
	// turn. A new container starts at a random one.
	after string
}

// New returns a dispatcher.
func New(store Store, sender Sender, cfg Config) (*Dispatcher, error) {
	if len(cfg.Routes) == 0 {
		return nil, errors.New("dispatch: no command routes configured")
	}
	cfg.BatchSize = cmp.Or(cfg.BatchSize, 50)
	cfg.MaxPerRun = cmp.Or(cfg.MaxPerRun, 5000)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, config.DefaultMaxAttempts)
	cfg.Lease = cmp.Or(cfg.Lease, 2400*time.Second)
	cfg.Reserve = cmp.Or(cfg.Reserve, 10*time.Second)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Dispatcher{store: store, sender: sender, cfg: cfg, after: randomUUID()}, nil
}

// Summary is a dispatch invocation's output (contract).
type Summary struct {
	Claimed     int `json:"claimed"`
	Dispatched  int `json:"dispatched"`
	Unsupported int `json:"unsupported"`
	Released    int `json:"released"`
}

// Handle is the Lambda entry point: it parses the event and runs.
func (d *Dispatcher) Handle(ctx context.Context, raw json.RawMessage) (Summary, error) {
	req, err := ParseEvent(raw)
	if err != nil {
		return Summary{}, err
	}
	return d.Run(ctx, req)
}

// Run claims batch after batch until nothing is due, the limit (or
// DISPATCH_MAX_PER_RUN) is reached or the time budget runs out, and sends one
// message per claimed command. A row whose message could not be sent is put
// back at once; the run then stops.
func (d *Dispatcher) Run(ctx context.Context, req Request) (s Summary, err error) {
	log := logging.ForRequest(ctx, d.cfg.Logger)
	run := runStats{}
	defer func() {
		if hostschema.IsSchemaError(err) {
			// The same statement fails the same way at every run until the
			// tables change: say which, and count it (its alarm).
			run.schemaErrors++
			log.ErrorContext(ctx, "a statement failed for a reason of the tables' shape (the host's tables changed?): run outboxctl check; "+
				"no row is lost: each waits where it is until the tables are fixed",
				"statement", sqlfile.StatementOf(err), "error", err.Error())
		}
		d.publish(ctx, log, &run)
		d.emit(s, run)
	}()
	scope := outbox.ClaimParams{MaxAttempts: d.cfg.MaxAttempts, Lease: d.cfg.Lease,
		MaxInFlight: d.cfg.MaxInFlight, ConnectionMaxInFlight: d.cfg.ConnectionMaxInFlight,
		ProviderMaxInFlight: d.cfg.ProviderMaxInFlight,
		OrganizationID:      req.OrganizationID, IDs: req.IDs}
	if d.cfg.Reconnections != nil {
		// A failure here only delays the resumption to the next run.
		if n, err := d.cfg.Reconnections.CheckReauthorized(ctx); err != nil {
			log.WarnContext(ctx, "could not check the connections needing reauthorization", "error", err.Error())
		} else if n > 0 {
			log.InfoContext(ctx, "connections reconnected by the host resume", "count", n)
		}
	}
	if d.cfg.LimitResets != nil {
		if n, err := d.cfg.LimitResets.ResolveEndedLimits(ctx); err != nil {
			log.WarnContext(ctx, "could not resolve the daily limit conflicts of connections no longer paused", "error", err.Error())
		} else if n > 0 {
			log.InfoContext(ctx, "connections whose daily limit reset resume", "count", n)
		}
	}
	// With nothing queued, failed or in flight and no forgotten start, the
	// sweep would change nothing and a claim would find nothing: the run
	// skips both (the sweep touches many tables: on a new connection its
	// parse and plan are most of an idle run's cost).
	idle, err := d.store.Idle(ctx, scope)
	if err != nil {
		return s, err
	}
	var sweep outbox.Sweep
	if !idle {
		if sweep, err = d.store.Sweep(ctx, scope); err != nil {
			return s, err
		}
	}
	if sweep.DeadLettered > 0 {
		run.deadLettered = sweep.DeadLettered
		log.WarnContext(ctx, "expired leases with no attempts left moved to dead_letter", "count", sweep.DeadLettered)
	}
	limit := cmp.Or(req.Limit, d.cfg.MaxPerRun)
	if req.IDs != nil {
		limit = min(limit, len(req.IDs))
	}
	// With nothing queued, failed or in flight a claim would find nothing:
	// the run skips it (an idle run's zero Sweep says so too).
	for sweep.Claimable && s.Claimed < limit {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d.cfg.Reserve {
			log.InfoContext(ctx, "dispatch time budget reached", "claimed", s.Claimed)
			break
		}
		want := min(d.cfg.BatchSize, limit-s.Claimed)
		scope.Limit = want
		d.mu.Lock()
		scope.After = d.after
		d.mu.Unlock()
		batch, err := d.store.ClaimBatch(ctx, scope)
		if err != nil {
			return s, err
		}
		claims := batch.Claims
		d.mu.Lock()
		d.after = batch.NextAfter(scope.After)
		d.mu.Unlock()
		s.Claimed += len(claims)
		behind := batch.HeldBehind
		for _, c := range claims {
			if c.Reclaimed {
				run.reclaimed++
			}
			if c.Followers && req.IDs == nil {
				// The next command of its entity is due once this one ends:
				// this run waits for it (a listed-ids run never claims it).
				scope.Heads = append(scope.Heads, c.ID)
				behind = true
			}
			if slices.Contains(d.cfg.Prerequisites, c.CommandType) && req.IDs == nil {
				// Commands may wait for it: this run looks once more, and
				// waits for it while one does.
				scope.Awaited = append(scope.Awaited, c.ID)
				behind = true
			}
			if c.Probe {
				run.probes++
				log.InfoContext(ctx, "circuit half-open: probe row claimed", "outboxId", c.ID,
					"organizationId", c.OrganizationID, "connectionId", c.ConnectionID)
			}
		}
		done, err := d.dispatchBatch(ctx, log, claims, &s, &run)
		if err != nil || done {
			logSummary(ctx, log, s, run, err)
			return s, err
		}
		if len(claims) < want {
			// Nothing more is due, or an in-flight cap holds the rest back,
			// or commands wait behind a row this run sent: wait for room
			// when the run may, else end.
			if !(batch.Held || behind) || d.cfg.RoomWait <= 0 || !d.wait(ctx) {
				break
			}
			if batch.Held {
				run.waits++
			} else {
				run.entityWaits++
			}
		}
	}
	logSummary(ctx, log, s, run, nil)
	return s, nil
}

// wait sleeps RoomWait unless that would run into the time budget or ctx
// ends; it says whether the run may claim again. A run without a deadline
// (never the case in Lambda) does not wait: nothing would end it.
func (d *Dispatcher) wait(ctx context.Context) bool {
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl)-d.cfg.RoomWait < d.cfg.Reserve {
		return false
	}
	t := time.NewTimer(d.cfg.RoomWait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// publish publishes the pending events and counts the connections by state
// once the run's claims are done. A failure is logged and leaves the events
// for the next run: it does not fail the dispatch.
func (d *Dispatcher) publish(ctx context.Context, log *slog.Logger, run *runStats) {
	if d.cfg.Events != nil {
		p, err := d.cfg.Events.PublishPending(ctx)
		run.eventsPublished, run.eventsFailed = p.Sent, p.Failed
		if err != nil {
			log.ErrorContext(ctx, "publishing events failed; the next run sends them", "published", p.Sent, "error", err.Error())
		}
	}
	if d.cfg.ConnectionCounts != nil {
		c, err := d.cfg.ConnectionCounts(ctx)
		if err != nil {
			log.ErrorContext(ctx, "counting connections by state failed", "error", err.Error())
			return
		}
		run.connections = &c
		if c.Disabled+c.Unauthorized > 0 {
			log.WarnContext(ctx, "connections held", "disabled", c.Disabled, "unauthorized", c.Unauthorized, "failing", c.Failing)
		}
	}
}

// runStats counts what a run did beyond its Summary.
type runStats struct {
	reclaimed    int // rows claimed again after their lease expired
	deadLettered int // expired leases with no attempts left
	probes       int // probe rows of half-open circuits
	waits        int // waits for room under an in-flight cap
	entityWaits  int // waits for a row this run sent, with commands of its entity behind it
	noConnection int // rows without a connection, ended as configuration_invalid
	schemaErrors int // statements the tables' shape refused (SchemaErrors)
	// Events published and refused (left for the next run).
	eventsPublished, eventsFailed int
	// connections counts the connections by state (nil: not counted).
	connections *health.Counts
}

func (d *Dispatcher) emit(s Summary, run runStats) {
	values := []metrics.Value{
		metrics.Counter("Claimed", s.Claimed), metrics.Counter("Dispatched", s.Dispatched),
		metrics.Counter("Released", s.Released), metrics.Counter("Unsupported", s.Unsupported),
		metrics.Counter("LeasesReclaimed", run.reclaimed), metrics.Counter("DeadLettered", run.deadLettered),
		metrics.Counter("CircuitProbes", run.probes), metrics.Counter("InFlightCapWaits", run.waits),
		metrics.Counter("NoConnection", run.noConnection), metrics.Counter("SchemaErrors", run.schemaErrors),
	}
	if d.cfg.Events != nil {
		values = append(values, metrics.Counter("EventsPublished", run.eventsPublished),
			metrics.Counter("EventsFailed", run.eventsFailed))
	}
	if c := run.connections; c != nil {
		values = append(values, metrics.Counter("ConnectionsDisabled", c.Disabled),
			metrics.Counter("ConnectionsUnauthorized", c.Unauthorized), metrics.Counter("ConnectionsFailing", c.Failing))
	}
	d.cfg.Metrics.Emit("", values...)
}

func logSummary(ctx context.Context, log *slog.Logger, s Summary, run runStats, err error) {
	level := slog.LevelInfo
	if err != nil || s.Released > 0 {
		level = slog.LevelError
	}
	log.Log(ctx, level, "dispatch run finished", "claimed", s.Claimed, "dispatched", s.Dispatched,
		"unsupported", s.Unsupported, "released", s.Released, "noConnection", run.noConnection,
		"capWaits", run.waits, "entityWaits", run.entityWaits, "error", errString(err))
}

// dispatchBatch routes one claimed batch. stop is set when a send failed:
// the failed rows were released and the run must not claim them again.
func (d *Dispatcher) dispatchBatch(ctx context.Context, log *slog.Logger, claims []outbox.Claim, s *Summary, run *runStats) (stop bool, err error) {
	byQueue := map[string][]outbox.Claim{}
	var unrouted, unconnected []outbox.Claim
	held := map[string][]outbox.Claim{} // command type → its rows
	for _, c := range claims {
		if c.Reclaimed {
			log.WarnContext(ctx, "lease expired; row claimed again", "outboxId", c.ID,
				"organizationId", c.OrganizationID, "attempt", c.AttemptCount)
		}
		if c.ConnectionID == "" {
			unconnected = append(unconnected, c)
		} else if q, ok := d.cfg.Routes[c.CommandType]; ok && q == "" {
			held[c.CommandType] = append(held[c.CommandType], c)
		} else if ok {
			byQueue[q] = append(byQueue[q], c)
		} else {
			unrouted = append(unrouted, c)
		}
	}
	// A failed end of the rows nothing can deliver stops the run, and puts
	// back every row of the batch not ended yet: none may wait out its lease.
	releaseRest := func(cause error, rest ...[]outbox.Claim) error {
		var back []outbox.Claim
		for _, cs := range rest {
			back = append(back, cs...)
		}
		for _, cs := range byQueue {
			back = append(back, cs...)
		}
		released, err := d.store.Release(context.WithoutCancel(ctx), back)
		s.Released += released
		log.ErrorContext(ctx, "could not end the batch's undeliverable rows; the rest of the batch released",
			"released", released, "error", cause.Error())
		return errors.Join(cause, err)
	}
	if len(unconnected) > 0 {
		// No worker can start a command without a connection (its message
		// would be refused as malformed and the row wait out its leases):
		// it ends here, without an attempt.
		n, err := d.store.DeadLetterNoConnection(ctx, unconnected)
		if err != nil {
			return true, releaseRest(err, unconnected, unrouted)
		}
		run.noConnection += n
		for _, c := range unconnected {
			log.WarnContext(ctx, "no integration connection; row moved to dead_letter (configuration_invalid)",
				"outboxId", c.ID, "organizationId", c.OrganizationID, "commandType", c.CommandType)
		}
	}
	for commandType, rows := range held {
		setting := strings.ToUpper(commandType) + "_QUEUE_URL"
		n, err := d.store.Hold(ctx, rows, fmt.Sprintf("no queue is configured for %s in this deployment (%s is not set): "+
			"the row waits, no attempt used", commandType, setting), HeldRecheck)
		if err != nil {
			var rest []outbox.Claim
			for _, rs := range held {
				rest = append(rest, rs...)
			}
			return true, releaseRest(err, rest, unrouted)
		}
		s.Released += n
		for _, c := range rows {
			log.ErrorContext(ctx, "command type without a queue in this deployment: row held; set "+setting,
				"outboxId", c.ID, "organizationId", c.OrganizationID, "commandType", c.CommandType,
				"retryInSeconds", HeldRecheck.Seconds())
		}
	}
	if len(unrouted) > 0 {
		n, err := d.store.MarkUnsupported(ctx, unrouted, "unsupported command type: no queue routes it")
		if err != nil {
			return true, releaseRest(err, unrouted)
		}
		s.Unsupported += n
		for _, c := range unrouted {
			log.WarnContext(ctx, "unsupported command type", "outboxId", c.ID,
				"organizationId", c.OrganizationID, "commandType", c.CommandType)
		}
	}
	sent, failed, sendErr := d.send(ctx, byQueue)
	s.Dispatched += sent
	if len(failed) == 0 {
		return false, nil
	}
	// Put the rows back even if ctx is done: no row may wait out its lease
	// because a send failed.
	released, err := d.store.Release(context.WithoutCancel(ctx), failed)
	s.Released += released
	for _, c := range failed {
		log.ErrorContext(ctx, "message not sent; row released", "outboxId", c.ID, "organizationId", c.OrganizationID)
	}
	if err != nil {
		return true, errors.Join(sendErr, err)
	}
	if sent == 0 && sendErr != nil {
		return true, fmt.Errorf("sending %d messages: %w", len(failed), sendErr)
	}
	return true, nil
}

// send sends the claims in batches of ten, the batches concurrently. It
// returns how many were sent, the claims that were not, and the last
// whole-call error.
func (d *Dispatcher) send(ctx context.Context, byQueue map[string][]outbox.Claim) (int, []outbox.Claim, error) {
	var (
		mu      sync.Mutex
		sent    int
		failed  []outbox.Claim
		lastErr error
	)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(5)
	for queue, claims := range byQueue {
		for chunk := range slices.Chunk(claims, 10) {
			g.Go(func() error {
				ok, bad, err := d.sendBatch(gctx, queue, chunk)
				mu.Lock()
				defer mu.Unlock()
				sent += ok
				failed = append(failed, bad...)
				if err != nil {
					lastErr = err
				}
				return nil
			})
		}
	}
	g.Wait()
	return sent, failed, lastErr
}

func (d *Dispatcher) sendBatch(ctx context.Context, queue string, claims []outbox.Claim) (int, []outbox.Claim, error) {
	entries := make([]types.SendMessageBatchRequestEntry, 0, len(claims))
	byID := make(map[string]outbox.Claim, len(claims))
	for _, c := range claims {
		body, err := message.Message{OutboxID: c.ID, OrganizationID: c.OrganizationID, ConnectionID: c.ConnectionID,
			CommandType: c.CommandType, ClaimToken: c.ClaimToken}.Encode()
		if err != nil {
			return 0, claims, err
		}
		entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(c.ID), MessageBody: aws.String(body)})
		byID[c.ID] = c
	}
	out, err := d.sender.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(queue), Entries: entries})
	if err != nil {
		d.cfg.Logger.ErrorContext(ctx, "SendMessageBatch failed", "queue", queue, "count", len(claims), "error", err.Error())
		return 0, claims, fmt.Errorf("SendMessageBatch to %s: %w", queue, err)
	}
	var failed []outbox.Claim
	for _, f := range out.Failed {
		c, ok := byID[aws.ToString(f.Id)]
		if !ok {
			continue
		}
		failed = append(failed, c)
		delete(byID, c.ID)
		d.cfg.Logger.ErrorContext(ctx, "SendMessageBatch entry failed", "queue", queue, "outboxId", c.ID,
			"organizationId", c.OrganizationID, "code", aws.ToString(f.Code), "senderFault", f.SenderFault)
	}
	// Anything neither successful nor failed was not confirmed: release it too
	// rather than let it wait out its lease.
	sent := 0
	for _, ok := range out.Successful {
		if _, found := byID[aws.ToString(ok.Id)]; found {
			delete(byID, aws.ToString(ok.Id))
			sent++
		}
	}
	for _, c := range byID {
		failed = append(failed, c)
	}
	return sent, failed, nil
}

// randomUUID returns a random version 4 uuid in its text form.
func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
