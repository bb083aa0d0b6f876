package push

import (
	"context"
	"log/slog"

	"integration-outbox/internal/hostschema"
	"integration-outbox/internal/metrics"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/sqlfile"
)

// cacheStats is implemented by a credential resolver that counts its cache
// hits and misses.
type cacheStats interface {
	Stats() (hits, misses int64)
}

// batchStats counts what one SQS batch did, for its EMF lines.
type batchStats struct {
	malformed, duplicates, notRecorded int
	// waiting counts the jobs sent back to wait for another command
	// (Delivery.Wait): a dependency, neither a failure nor a delivery.
	waiting int
	// schemaErrors: statements the tables' shape refused (SchemaErrors).
	schemaErrors   int
	hits0, misses0 int64
	byProvider     map[string]*providerStats
}

type providerStats struct {
	statuses       map[outbox.Status]int
	latencyMs      []float64
	circuitsOpened int
}

// circuitOpened counts a circuit of the provider name that opened (or
// opened again after a failed probe).
func (s *batchStats) circuitOpened(name string) {
	s.provider(name).circuitsOpened++
}

func (s *batchStats) provider(name string) *providerStats {
	if name == "" {
		name = "unknown"
	}
	ps := s.byProvider[name]
	if ps == nil {
		ps = &providerStats{statuses: map[outbox.Status]int{}}
		s.byProvider[name] = ps
	}
	return ps
}

func newBatchStats(creds Credentials) *batchStats {
	s := &batchStats{byProvider: map[string]*providerStats{}}
	if cs, ok := creds.(cacheStats); ok {
		s.hits0, s.misses0 = cs.Stats()
	}
	return s
}

func (s *batchStats) add(results []jobResult, recorded map[string]bool) {
	for _, r := range results {
		if !recorded[r.outcome.OutboxID] {
			s.notRecorded++
			continue
		}
		if r.outcome.WaitingFor != "" {
			s.waiting++
			continue
		}
		ps := s.provider(r.provider)
		ps.statuses[r.outcome.Status]++
		if r.latency > 0 {
			ps.latencyMs = append(ps.latencyMs, float64(r.latency.Microseconds())/1000)
		}
	}
}

// statusMetric names the metric each recorded status counts into.
var statusMetric = []struct {
	status outbox.Status
	metric string
}{
	{outbox.StatusCompleted, "Completed"},
	{outbox.StatusFailed, "Failed"},
	{outbox.StatusDeadLetter, "DeadLettered"},
	{outbox.StatusUnsupported, "Unsupported"},
	{outbox.StatusUncertain, "Uncertain"},
	{outbox.StatusProcessing, "Accepted"},
}

func (s *batchStats) emit(m *metrics.Emitter, creds Credentials) {
	if m == nil {
		return
	}
	fn := []metrics.Value{
		metrics.Counter("DuplicateDeliveriesIgnored", s.duplicates),
		metrics.Counter("MalformedMessages", s.malformed),
		metrics.Counter("ResultsNotRecorded", s.notRecorded),
		metrics.Counter("SchemaErrors", s.schemaErrors),
		metrics.Counter("WaitingForDependency", s.waiting),
	}
	if cs, ok := creds.(cacheStats); ok {
		hits, misses := cs.Stats()
		fn = append(fn, metrics.Counter("SecretCacheHits", int(hits-s.hits0)),
			metrics.Counter("SecretCacheMisses", int(misses-s.misses0)))
	}
	m.Emit("", fn...)
	for name, ps := range s.byProvider {
		var vals []metrics.Value
		for _, sm := range statusMetric {
			vals = append(vals, metrics.Counter(sm.metric, ps.statuses[sm.status]))
		}
		vals = append(vals, metrics.Value{Name: "ProviderLatency", Unit: metrics.Milliseconds, Values: ps.latencyMs})
		if ps.circuitsOpened > 0 {
			vals = append(vals, metrics.Counter("CircuitOpened", ps.circuitsOpened))
		}
		m.Emit(name, vals...)
	}
}

// schemaError counts err, and logs the statement and PostgreSQL's error,
// when it is a statement the tables' shape refused.
func (s *batchStats) schemaError(ctx context.Context, log *slog.Logger, err error) {
	if !hostschema.IsSchemaError(err) {
		return
	}
	s.schemaErrors++
	log.ErrorContext(ctx, "a statement failed for a reason of the tables' shape (the host's tables changed?): run outboxctl check",
		"statement", sqlfile.StatementOf(err), "error", err.Error())
}
