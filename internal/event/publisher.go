// Package event publishes the events the outbox statements write into
// integration_outbox_events (in the transaction of the change each reports)
// to an EventBridge bus: at least once, each event until PutEvents accepts
// it, the entries it refused sent again by a later run.
package event

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"integration-outbox/internal/sqlfile"
)

// Source is the Source of every event (contract).
const Source = "integration-outbox"

// DetailTypes of the events (contract).
const (
	CommandFailing         = "Command Failing"
	CommandDeadLettered    = "Command Dead-Lettered"
	ConnectionUnauthorized = "Connection Unauthorized"
	ConnectionDisabled     = "Connection Disabled"
	ConnectionRecovered    = "Connection Recovered"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

var (
	takePendingSQL   = statement("take_pending")
	markPublishedSQL = statement("mark_published")
	markFailedSQL    = statement("mark_failed")
)

// statement is sql/<name>.sql without its leading comment.
func statement(name string) string { return sqlfile.Statement(sqlFiles, "event", name) }

// DB is what the publisher needs of the database.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// API is the EventBridge call the publisher makes (an *eventbridge.Client).
type API interface {
	PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, opts ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error)
}

// maxEntries is PutEvents' limit of entries per call.
const maxEntries = 10

// Config configures a Publisher.
type Config struct {
	// BusName is the bus the events go to (EVENT_BUS_NAME).
	BusName string
	// MaxPerRun bounds the events one PublishPending sends (default 100).
	MaxPerRun int
	// Lease is how long a taken event is kept from other publishers while
	// this one sends it (default 30s).
	Lease time.Duration
	// RetryIn is how long an event PutEvents refused waits before it is
	// taken again (default 30s: the next scheduled run).
	RetryIn time.Duration
	// Keep is how long published events stay in the table (default 7 days).
	Keep   time.Duration
	Logger *slog.Logger
}

// Publisher sends pending events to EventBridge.
type Publisher struct {
	db  DB
	api API
	cfg Config
}

// NewPublisher returns a publisher of the events in db to cfg.BusName.
func NewPublisher(db DB, api API, cfg Config) (*Publisher, error) {
	if cfg.BusName == "" {
		return nil, errors.New("event: no bus name (EVENT_BUS_NAME)")
	}
	if api == nil {
		return nil, errors.New("event: no EventBridge client")
	}
	cfg.MaxPerRun = cmp.Or(cfg.MaxPerRun, 100)
	cfg.Lease = cmp.Or(cfg.Lease, 30*time.Second)
	cfg.RetryIn = cmp.Or(cfg.RetryIn, 30*time.Second)
	cfg.Keep = cmp.Or(cfg.Keep, 7*24*time.Hour)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Publisher{db: db, api: api, cfg: cfg}, nil
}

// Published counts what one PublishPending did.
type Published struct {
	// Sent is how many events EventBridge accepted.
	Sent int
	// Failed is how many it refused or did not answer for: they stay
	// pending for a later run.
	Failed int
}

// pending is one event taken for publishing.
type pending struct {
	id, detailType, detail string
	createdAt              time.Time
}

// PublishPending sends pending events, oldest first, ten per PutEvents
// call, up to MaxPerRun. Events EventBridge accepted are marked published;
// the others (a failed call, or entries the answer reports failed) wait for
// a later run. It stops at the first call that failed or had an entry
// refused. The error is that of the
// database or of the last failed call.
func (p *Publisher) PublishPending(ctx context.Context) (Published, error) {
	var out Published
	for out.Sent+out.Failed < p.cfg.MaxPerRun {
		batch, err := p.take(ctx, min(maxEntries, p.cfg.MaxPerRun-out.Sent-out.Failed))
		if err != nil {
			return out, err
		}
		if len(batch) == 0 {
			return out, nil
		}
		sent, failed, callErr := p.put(ctx, batch)
		out.Sent += len(sent)
		out.Failed += len(failed)
		if err := p.mark(context.WithoutCancel(ctx), sent, failed); err != nil {
			return out, err
		}
		if callErr != nil {
			return out, callErr
		}
		if len(failed) > 0 {
			// Refused entries (throttling, most often) wait for the next
			// run rather than be sent again at once.
			return out, nil
		}
		if len(batch) < maxEntries {
			return out, nil
		}
	}
	return out, nil
}

func (p *Publisher) take(ctx context.Context, n int) ([]pending, error) {
	rows, err := p.db.Query(ctx, takePendingSQL, pgx.NamedArgs{
		"take_limit": n, "lease_seconds": p.cfg.Lease.Seconds(), "keep_seconds": p.cfg.Keep.Seconds()})
	if err != nil {
		return nil, fmt.Errorf("taking pending events: %w", err)
	}
	batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pending, error) {
		var e pending
		return e, r.Scan(&e.id, &e.detailType, &e.detail, &e.createdAt)
	})
	if err != nil {
		return nil, fmt.Errorf("taking pending events: %w", err)
	}
	slices.SortFunc(batch, func(a, b pending) int { return a.createdAt.Compare(b.createdAt) })
	return batch, nil
}

// put sends one batch and says which events were accepted and which were
// not (with why).
func (p *Publisher) put(ctx context.Context, batch []pending) (sent []string, failed map[string]string, err error) {
	entries := make([]types.PutEventsRequestEntry, len(batch))
	for i, e := range batch {
		entries[i] = types.PutEventsRequestEntry{
			EventBusName: aws.String(p.cfg.BusName), Source: aws.String(Source),
			DetailType: aws.String(e.detailType), Detail: aws.String(e.detail), Time: aws.Time(e.createdAt),
		}
	}
	failed = map[string]string{}
	res, err := p.api.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: entries})
	if err != nil {
		for _, e := range batch {
			failed[e.id] = "PutEvents: " + err.Error()
		}
		p.cfg.Logger.ErrorContext(ctx, "PutEvents failed; the events stay pending", "count", len(batch), "error", err.Error())
		return nil, failed, fmt.Errorf("publishing %d events: %w", len(batch), err)
	}
	for i, e := range batch {
		// The answer has one entry per request entry, in order; an entry
		// missing from it was not confirmed.
		if i >= len(res.Entries) {
			failed[e.id] = "PutEvents: no answer for the entry"
			continue
		}
		r := res.Entries[i]
		if r.ErrorCode != nil || r.EventId == nil {
			failed[e.id] = fmt.Sprintf("PutEvents entry: %s: %s", aws.ToString(r.ErrorCode), aws.ToString(r.ErrorMessage))
			p.cfg.Logger.ErrorContext(ctx, "PutEvents entry failed; the event stays pending", "eventId", e.id,
				"detailType", e.detailType, "code", aws.ToString(r.ErrorCode))
			continue
		}
		sent = append(sent, e.id)
	}
	return sent, failed, nil
}

func (p *Publisher) mark(ctx context.Context, sent []string, failed map[string]string) error {
	if len(sent) > 0 {
		if _, err := p.db.Exec(ctx, markPublishedSQL, pgx.NamedArgs{"ids": sent}); err != nil {
			return fmt.Errorf("marking %d events published: %w", len(sent), err)
		}
	}
	if len(failed) > 0 {
		ids := make([]string, 0, len(failed))
		errs := make([]string, 0, len(failed))
		for id, why := range failed {
			ids = append(ids, id)
			errs = append(errs, why)
		}
		if _, err := p.db.Exec(ctx, markFailedSQL, pgx.NamedArgs{
			"ids": ids, "errors": errs, "retry_seconds": p.cfg.RetryIn.Seconds()}); err != nil {
			return fmt.Errorf("giving %d events back: %w", len(failed), err)
		}
	}
	return nil
}

// Statements are every statement of the package, for the schema check
// (internal/schemacheck).
func Statements() []sqlfile.Named { return sqlfile.All(sqlFiles, "event") }
