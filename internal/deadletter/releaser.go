// Package deadletter consumes the command queue's dead-letter queue: a
// message lands there when the push function failed on every one of its
// deliveries (an outage of the function, its database or its network). The
// message's row would otherwise keep its lease, and its place in the
// in-flight caps, for LEASE_SECONDS; the Releaser gives it back at once,
// fenced by the message's claim token, so that the next dispatch run claims
// it again (internal/outbox ReleaseDeadLettered says exactly which rows).
//
// Every message received is counted (DeadLetterMessages), so the alarm on
// that metric keeps the signal a dead-letter queue's depth used to give.
package deadletter

import (
	"cmp"
	"context"
	"errors"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"

	"integration-outbox/internal/logging"
	"integration-outbox/internal/message"
	"integration-outbox/internal/metrics"
	"integration-outbox/internal/outbox"
)

// Store is what the releaser needs of the outbox.
type Store interface {
	ReleaseDeadLettered(ctx context.Context, msgs []outbox.DeadLetteredMessage, maxAttempts int) ([]outbox.ReleasedRow, error)
}

// Config configures a Releaser.
type Config struct {
	// MaxAttempts is MAX_ATTEMPTS: a released row with no attempts left goes
	// to dead_letter instead of failed.
	MaxAttempts int
	Logger      *slog.Logger
	// Metrics receives one EMF line per batch (nil: none).
	Metrics *metrics.Emitter
}

// Releaser handles SQS batches of the dead-letter queue.
type Releaser struct {
	store Store
	cfg   Config
}

// New returns a releaser on store.
func New(store Store, cfg Config) (*Releaser, error) {
	if store == nil {
		return nil, errors.New("deadletter: no store")
	}
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, 10)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Releaser{store: store, cfg: cfg}, nil
}

// Metric names (dimension Function only).
const (
	// MetricMessages counts every dead-letter message received (a message
	// retried after a database failure counts again): messages reached the
	// dead-letter queue.
	MetricMessages = "DeadLetterMessages"
	// MetricReleased counts rows put back as failed, due now.
	MetricReleased = "DeadLetterRowsReleased"
	// MetricDeadLettered counts rows that had no attempts left and went to
	// dead_letter.
	MetricDeadLettered = "DeadLettered"
	// MetricStale counts messages whose claim was no longer current
	// (repeated, reclaimed, recorded, or a push still running).
	MetricStale = "StaleDeadLetterMessages"
	// MetricMalformed counts messages that are not command messages.
	MetricMalformed = "MalformedMessages"
)

type received struct {
	messageID string
	msg       message.Message
}

// Handle releases the rows of one batch of dead-letter messages in one
// statement. Malformed messages are logged and acknowledged (never
// retried); when the database cannot be reached, every readable record is
// reported in batchItemFailures, so SQS delivers it again after the queue's
// visibility timeout.
func (r *Releaser) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	log := logging.ForRequest(ctx, r.cfg.Logger)
	resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
	var (
		recs                             []received
		malformed, released, dead, stale int
	)
	defer func() {
		if err := r.cfg.Metrics.Emit("", metrics.Counter(MetricMessages, len(ev.Records)),
			metrics.Counter(MetricReleased, released), metrics.Counter(MetricDeadLettered, dead),
			metrics.Counter(MetricStale, stale), metrics.Counter(MetricMalformed, malformed)); err != nil {
			log.WarnContext(ctx, "could not write the dead-letter metrics", "error", err.Error())
		}
	}()
	for _, rec := range ev.Records {
		m, err := message.Decode(rec.Body)
		if err != nil {
			malformed++
			log.WarnContext(ctx, "malformed dead-letter message acknowledged without processing",
				"messageId", rec.MessageId, "error", err.Error())
			continue
		}
		recs = append(recs, received{messageID: rec.MessageId, msg: m})
	}
	if len(recs) == 0 {
		return resp, nil
	}
	msgs := make([]outbox.DeadLetteredMessage, len(recs))
	for i, rc := range recs {
		msgs[i] = outbox.DeadLetteredMessage{OutboxID: rc.msg.OutboxID, OrganizationID: rc.msg.OrganizationID,
			ConnectionID: rc.msg.ConnectionID, ClaimToken: rc.msg.ClaimToken}
	}
	rows, err := r.store.ReleaseDeadLettered(ctx, msgs, r.cfg.MaxAttempts)
	if err != nil {
		log.ErrorContext(ctx, "could not release the rows of dead-letter messages; records left for redelivery",
			"count", len(recs), "error", err.Error())
		for _, rc := range recs {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rc.messageID})
		}
		return resp, nil
	}
	status := make(map[string]outbox.Status, len(rows))
	for _, row := range rows {
		status[row.ID] = row.Status
	}
	for _, rc := range recs {
		attrs := []any{"messageId", rc.messageID, "outboxId", rc.msg.OutboxID, "organizationId", rc.msg.OrganizationID,
			"commandType", rc.msg.CommandType}
		s, ok := status[rc.msg.OutboxID]
		// A message repeated in one batch releases its row once.
		delete(status, rc.msg.OutboxID)
		switch {
		case !ok:
			stale++
			log.InfoContext(ctx, "dead-letter message acknowledged: its claim is no longer current", attrs...)
		case s == outbox.StatusDeadLetter:
			dead++
			log.WarnContext(ctx, "row dead-lettered: its message reached the dead-letter queue with no attempts left", attrs...)
		default:
			released++
			log.WarnContext(ctx, "row released for the next dispatch run: its message reached the dead-letter queue", attrs...)
		}
	}
	return resp, nil
}
