package outbox

import "time"

// Health configures the connection state the record statement keeps
// (integration_outbox_connection_state, record.sql's state_ CTEs) and
// the events the outbox statements write (integration_outbox_events).
type Health struct {
	// Events writes an event for each command failing, command
	// dead-lettered and connection transition (EVENT_BUS_NAME set); off,
	// none is written.
	Events bool
	// FailingAfter is how long a connection's calls must all have failed
	// before its connection_failing conflict opens (CONNECTION_FAILING_AFTER).
	FailingAfter time.Duration
	// DisableAfter is how long they must all have failed before it is
	// disabled (CONNECTION_DISABLE_AFTER). 0: never.
	DisableAfter time.Duration
	// DisableMinSpan is the least time between its first and last failure
	// for it to be disabled (CONNECTION_DISABLE_MIN_SPAN).
	DisableMinSpan time.Duration
	// CommandFailingAfterAttempts is the failed attempt of a command that
	// writes its Command Failing event (COMMAND_FAILING_AFTER_ATTEMPTS).
	CommandFailingAfterAttempts int
}

// DefaultHealth is the connection health of the configuration's defaults,
// events off.
func DefaultHealth() Health {
	return Health{FailingAfter: time.Hour, DisableAfter: 120 * time.Hour, DisableMinSpan: 12 * time.Hour,
		CommandFailingAfterAttempts: 4}
}

// WithHealth returns a store on the same database whose statements keep
// connection health and write events as h says.
func (s *Store) WithHealth(h Health) *Store {
	n := *s
	n.health = h
	return &n
}

// WithMissingRoutines makes the store tell f which of its statements'
// routines the database lacks (internal/sqlroutine), each time it reads
// them and finds some missing: once a container, and again a minute later
// while they are. It changes the store s (its routines are shared by the
// stores made from it).
func (s *Store) WithMissingRoutines(f func(statements []string)) *Store {
	s.routines.Notify(f)
	return s
}
