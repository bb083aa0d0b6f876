// Package outbox is the outbox aggregate: claiming rows for dispatch, putting
// back what could not be sent, starting jobs under their claim token and
// recording their results. Its SQL lives in sql/, one file per statement,
// loaded by sql.go.
package outbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"integration-outbox/internal/hostschema"
	"integration-outbox/internal/pgtx"
	"integration-outbox/internal/sqlfile"
	"integration-outbox/internal/sqlroutine"
)

// Status is an outbox row's status (contract).
type Status string

// Statuses of an outbox row (contract).
const (
	StatusQueued      Status = "queued"
	StatusProcessing  Status = "processing"
	StatusCompleted   Status = "completed"
	StatusFailed      Status = "failed"
	StatusUncertain   Status = "uncertain"
	StatusUnsupported Status = "unsupported"
	StatusDeadLetter  Status = "dead_letter"
)

// ConflictType names the cause of a dead-lettered row in the conflict it
// opens (contract).
type ConflictType string

// Conflict types (contract).
const (
	// ConflictProviderRejected: the provider refused the command (a 4xx
	// other than 408/409/429), or its attempts are exhausted.
	ConflictProviderRejected ConflictType = "provider_rejected"
	// ConflictCredentialRejected: the credential_reference is outside the
	// prefix, region, account or tenant, or its secret is not JSON.
	ConflictCredentialRejected ConflictType = "credential_rejected"
	// ConflictConfigurationInvalid: the connection is missing or its
	// config_json is unusable.
	ConflictConfigurationInvalid ConflictType = "configuration_invalid"
	// ConflictEntityNotFound: the command's entity is missing for the
	// tenant and the connection's location.
	ConflictEntityNotFound ConflictType = "entity_not_found"
	// ConflictPayloadInvalid: payload_json or the idempotency key cannot be
	// sent.
	ConflictPayloadInvalid ConflictType = "payload_invalid"
	// ConflictProviderDuplicate: the provider holds two or more documents
	// an earlier create of the command, whose answer was lost, may have
	// made; a person decides which is the command's.
	ConflictProviderDuplicate ConflictType = "provider_duplicate"
)

// DB is what the store needs of a pool, a connection or a transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store runs the outbox statements.
type Store struct {
	db      DB
	circuit Circuit
	health  Health
	// circuitsReset is set once a store with the breaker off has reset
	// every circuit (before its first claim).
	circuitsReset *atomic.Bool
	// lengths are the host outbox's text lengths the record cuts to.
	lengths *textLengths
	// routines are the routines of Routines the database has.
	routines *sqlroutine.Catalog
	// recordSQLOnly: every batch goes to record.sql (WithRecordSQLOnly).
	recordSQLOnly bool
}

// NewStore returns a store on db, its circuit breaker off, its connection
// health at DefaultHealth (events off).
func NewStore(db DB) *Store {
	return &Store{db: db, health: DefaultHealth(), circuitsReset: new(atomic.Bool), lengths: &textLengths{},
		routines: sqlroutine.NewCatalog(Routines()...)}
}

// Circuit configures the circuit breaker that Record feeds.
type Circuit struct {
	// FailureThreshold is how many consecutive retryable failures of a
	// connection open its circuit (CIRCUIT_FAILURE_THRESHOLD). 0: off.
	FailureThreshold int
	// Cooldown is how long a circuit first stays open (CIRCUIT_COOLDOWN); it
	// doubles each time the probe fails, up to an hour.
	Cooldown time.Duration
}

// WithCircuit returns a store on the same database whose Record feeds the
// circuit breaker c.
func (s *Store) WithCircuit(c Circuit) *Store {
	n := *s
	n.circuit = c
	n.circuitsReset = new(atomic.Bool)
	return &n
}

// WithRecordSQLOnly returns a store on the same database whose Record sends
// every batch to record.sql, as the builds before record_completed.sql
// did: the bench's churn runs it beside ours (-churn-record-sql) to
// measure what the lighter statement saves. The functions never use it.
func (s *Store) WithRecordSQLOnly() *Store {
	n := *s
	n.recordSQLOnly = true
	return &n
}

// Circuit signals of an Outcome.
const (
	// CircuitSuccess: the provider answered (the connection works).
	CircuitSuccess = "success"
	// CircuitFailure: the provider call failed in a retryable way.
	CircuitFailure = "failure"
)

// CircuitChange is a circuit that changed state as results were recorded.
type CircuitChange struct {
	ConnectionID string
	// Transition is "opened", "reopened" (the probe failed) or "closed".
	Transition string
	// OpenUntil is when the cooldown ends (zero once closed).
	OpenUntil time.Time
}

// Recorded is what Record stored.
type Recorded struct {
	// IDs are the rows whose result was recorded.
	IDs []string
	// Circuits are the circuits the results changed.
	Circuits []CircuitChange
	// Failed, when set, is the host's tables' refusal of the batch's one
	// statement, after which each result was recorded alone: Degraded
	// were recorded without their conflict and connection health, Refused
	// not at all (they stay under their lease).
	Failed   error
	Degraded []string
	Refused  []RefusedResult
}

// RefusedResult is a result the host's tables refused even alone.
type RefusedResult struct {
	ID  string
	Err error
}

// Claim is one row claimed for dispatch.
type Claim struct {
	ID             string
	OrganizationID string
	ConnectionID   string
	CommandType    string
	ClaimToken     string
	AttemptCount   int
	// Reclaimed is set when the row was claimed again after its lease expired.
	Reclaimed bool
	// Probe is set when the row is the probe of its connection's half-open
	// circuit.
	Probe bool
	// Followers is set when due commands of the row's entity wait behind
	// it (per-entity order, on an ordered connection): the next one can be
	// claimed once this one ends.
	Followers bool
	CreatedAt time.Time
}

// ClaimParams bounds one claim.
type ClaimParams struct {
	Limit       int
	MaxAttempts int
	Lease       time.Duration
	// MaxInFlight caps the leased rows across all organizations
	// (DISPATCH_MAX_IN_FLIGHT): a claim takes at most MaxInFlight minus the
	// rows in flight. 0: no cap.
	MaxInFlight int
	// ConnectionMaxInFlight caps the leased rows of one connection
	// (CONNECTION_MAX_IN_FLIGHT) unless its config_json.maxInFlight says
	// otherwise. 0: no cap.
	ConnectionMaxInFlight int
	// ProviderMaxInFlight caps the leased rows of a connection of the
	// provider it names (Xero 5, QuickBooks Online 10) unless the
	// connection's config_json.maxInFlight says otherwise; it wins over
	// ConnectionMaxInFlight.
	ProviderMaxInFlight map[string]int
	// After is the organization id the claim's walk over organizations
	// starts after (it wraps around); the dispatcher rotates it so that
	// successive claims serve every organization in turn. Empty: from the
	// start.
	After string
	// OrganizationID, when set, claims only that organization's rows.
	OrganizationID string
	// IDs, when non-nil, claims only these rows.
	IDs []string
	// Heads are rows this run claimed with Followers: while one of them is
	// still in flight (leased, no result recorded), the batch is
	// HeldBehind.
	Heads []string
	// Awaited are rows this run claimed that other commands may wait for
	// (a dependency of theirs): while one of them is still in flight and a row
	// waits for it (waiting_for_outbox_id), the batch is HeldBehind.
	Awaited []string
}

// scope returns the optional organization and id filters as SQL arguments.
func (p ClaimParams) scope() (org, ids any) {
	if p.OrganizationID != "" {
		org = p.OrganizationID
	}
	if p.IDs != nil {
		ids = p.IDs
	}
	return org, ids
}

// Batch is what one claim took.
type Batch struct {
	Claims []Claim
	// Held is set when an in-flight cap (DISPATCH_MAX_IN_FLIGHT or a
	// connection's limit) held due rows back: more can be claimed once rows
	// in flight finish. Rows the circuit breaker or per-entity order holds
	// back do not set it: nothing this run does frees them.
	Held bool
	// HeldBehind is set when one of ClaimParams.Heads is still in flight
	// (commands of its entity wait behind it, and the claim after its
	// result takes the next one), or one of ClaimParams.Awaited is, with
	// rows waiting for it (its result makes them due).
	HeldBehind bool
}

// NextAfter returns the ClaimParams.After that continues the rotation
// after this batch: the last organization, in walk order from after, that
// got a row (after itself when the batch is empty).
func (b Batch) NextAfter(after string) string {
	var beyond, wrapped string
	for _, c := range b.Claims {
		org := c.OrganizationID
		if org > after {
			beyond = max(beyond, org)
		} else {
			wrapped = max(wrapped, org)
		}
	}
	return cmp.Or(wrapped, beyond, after)
}

// claimLockKey names the transaction-level advisory lock that serializes
// claims: each counts what is in flight, which circuits have a probe out and
// which entities are busy, and claims the rest, which two claims at once
// would both take.
const claimLockKey = "integration_outbox_claim"

// Claim claims up to p.Limit due rows (see ClaimBatch).
func (s *Store) Claim(ctx context.Context, p ClaimParams) ([]Claim, error) {
	b, err := s.ClaimBatch(ctx, p)
	return b.Claims, err
}

// ClaimBatch claims up to p.Limit due rows within the in-flight caps,
// organizations interleaved and oldest first within each, one row at a time
// per entity on ordered connections, skipping rows other transactions hold:
// each gets status processing, attempt_count+1, a fresh claim token and a
// lease. Claims are serialized by an advisory lock so that concurrent
// dispatch runs cannot both take the same room, the same probe or the same
// entity's turn. The store's circuit breaker decides whether circuits are
// honoured (off: none is read, and the store's first claim resets every
// circuit). The claim runs in its own transaction (a savepoint when the store
// is on a transaction): the scheduled claim (claim_scheduled.sql), or the
// listed one (claim_listed.sql) when p.IDs is set.
func (s *Store) ClaimBatch(ctx context.Context, p ClaimParams) (Batch, error) {
	bg, ok := pgtx.Savepoints(s.db)
	if !ok {
		return Batch{}, errors.New("claiming outbox batch: the store's database cannot begin a transaction")
	}
	resetting := s.circuit.FailureThreshold <= 0 && !s.circuitsReset.Load()
	var b Batch
	err := pgtx.Do(ctx, bg, pgx.TxOptions{}, func(tx pgx.Tx) error {
		// The claim's routine sets claim_setup.sql's settings for its own
		// run; a plain claim needs them set on its transaction.
		routine, err := s.routines.Present(ctx, tx, claimStatement(p))
		if err != nil {
			return fmt.Errorf("reading the statements' routines: %w", err)
		}
		setup := claimSetupSQL
		if routine {
			setup = claimLockSQL
		}
		if _, err := tx.Exec(ctx, setup, pgx.NamedArgs{"lock_key": claimLockKey}); err != nil {
			return fmt.Errorf("taking the claim lock: %w", err)
		}
		if resetting {
			if _, err := tx.Exec(ctx, resetCircuitsSQL); err != nil {
				return fmt.Errorf("resetting the circuits (the breaker is off): %w", err)
			}
		}
		b, err = s.claimBatch(ctx, tx, p)
		return err
	})
	if err != nil {
		return Batch{}, fmt.Errorf("claiming outbox batch: %w", sqlfile.Wrap(claimName(p), err))
	}
	if resetting {
		s.circuitsReset.Store(true)
	}
	return b, nil
}

// providerCaps is caps as the claim reads them: a JSON object of the
// positive caps by provider name.
func providerCaps(caps map[string]int) string {
	kept := map[string]int{}
	for name, n := range caps {
		if n > 0 {
			kept[name] = n
		}
	}
	b, _ := json.Marshal(kept) // a map of strings to ints always encodes
	return string(b)
}

// claimName is the name of claimStatement(p) in the logs.
func claimName(p ClaimParams) string { return claimStatement(p).Name }

// claimStatement is the claim statement for p: the listed claim when p
// names its rows, else the scheduled one.
func claimStatement(p ClaimParams) *sqlroutine.Statement {
	if p.IDs != nil {
		return claimListed
	}
	return claimScheduled
}

// claimArgs are the claim statement's arguments for p.
func (s *Store) claimArgs(p ClaimParams) pgx.NamedArgs {
	org, ids := p.scope()
	return pgx.NamedArgs{
		"claim_limit": p.Limit, "max_attempts": p.MaxAttempts, "lease_seconds": p.Lease.Seconds(),
		"organization_id": org, "ids": ids, "max_in_flight": p.MaxInFlight,
		"connection_max_in_flight": p.ConnectionMaxInFlight,
		"provider_max_in_flight":   providerCaps(p.ProviderMaxInFlight),
		"after_organization":       cmp.Or(p.After, "00000000-0000-0000-0000-000000000000"),
		"circuit_on":               s.circuit.FailureThreshold > 0,
		"heads":                    p.Heads,
		"awaited":                  p.Awaited,
	}
}

func (s *Store) claimBatch(ctx context.Context, db DB, p ClaimParams) (Batch, error) {
	if len(p.Heads) > 0 && p.IDs == nil {
		if _, err := db.Exec(ctx, wakeFollowersSQL, pgx.NamedArgs{"heads": p.Heads}); err != nil {
			return Batch{}, fmt.Errorf("waking the followers of the run's ended heads: %w", sqlfile.Wrap("outbox/wake_followers", err))
		}
	}
	rows, err := s.routines.Query(ctx, db, claimStatement(p), s.claimArgs(p))
	if err != nil {
		return Batch{}, err
	}
	var b Batch
	for rows.Next() {
		var (
			id, org, conn, cmdType, token *string
			attempts                      *int
			reclaimed, probe              *bool
			created                       *time.Time
			followers                     bool
		)
		if err := rows.Scan(&id, &org, &conn, &cmdType, &token, &attempts, &reclaimed, &probe, &created,
			&followers, &b.Held, &b.HeldBehind); err != nil {
			rows.Close()
			return Batch{}, err
		}
		if id == nil {
			continue // nothing claimed: the one row says only whether a cap held rows back
		}
		b.Claims = append(b.Claims, Claim{ID: *id, OrganizationID: *org, ConnectionID: *conn, CommandType: *cmdType,
			ClaimToken: *token, AttemptCount: *attempts, Reclaimed: *reclaimed, Probe: *probe, Followers: followers,
			CreatedAt: *created})
	}
	if err := rows.Err(); err != nil {
		return Batch{}, err
	}
	slices.SortFunc(b.Claims, func(a, b Claim) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return b, nil
}

// DeadLetterExpired moves rows whose lease expired after their last attempt
// to dead_letter and opens their conflict, within the scope of p (its
// OrganizationID and IDs; Limit and Lease are not used). It returns how many
// it moved.
func (s *Store) DeadLetterExpired(ctx context.Context, p ClaimParams) (int, error) {
	sw, err := s.Sweep(ctx, p)
	return sw.DeadLettered, err
}

// Idle reports whether a dispatch run in the scope of p (its
// OrganizationID and IDs) has nothing to do: no row that the sweep
// (Sweep) could end or a claim could take, and no start the sweep would
// delete. It reads two tables and writes nothing (sql/idle.sql), so that an
// idle run on a new connection does not pay for parsing and planning the
// sweep.
func (s *Store) Idle(ctx context.Context, p ClaimParams) (bool, error) {
	org, ids := p.scope()
	var idle bool
	if err := s.routines.QueryRow(ctx, s.db, idleCheck, pgx.NamedArgs{"organization_id": org, "ids": ids}).Scan(&idle); err != nil {
		return false, fmt.Errorf("checking for work to dispatch: %w", sqlfile.Wrap("outbox/idle", err))
	}
	return idle, nil
}

// Sweep is what a dispatch run's sweep found.
type Sweep struct {
	// DeadLettered is how many rows with no attempt left it ended.
	DeadLettered int
	// Claimable is false when no row of the scope is queued, failed or
	// processing: a claim would find nothing.
	Claimable bool
}

// Sweep is DeadLetterExpired that also says whether a claim of the same
// scope could find anything (one probe of each claim index, in the same
// statement).
func (s *Store) Sweep(ctx context.Context, p ClaimParams) (Sweep, error) {
	org, ids := p.scope()
	var sw Sweep
	if err := s.routines.QueryRow(ctx, s.db, deadLetterExpired, pgx.NamedArgs{
		"max_attempts": p.MaxAttempts, "organization_id": org, "ids": ids, "events_on": s.health.Events,
	}).Scan(&sw.DeadLettered, &sw.Claimable); err != nil {
		return Sweep{}, fmt.Errorf("dead-lettering expired leases: %w", sqlfile.Wrap("outbox/dead_letter_expired", err))
	}
	return sw, nil
}

// Release puts claimed, not yet started rows back at once: due now, the
// attempt not consumed.
func (s *Store) Release(ctx context.Context, claims []Claim) (int, error) {
	if len(claims) == 0 {
		return 0, nil
	}
	args := claimColumns(claims)
	args["delay_seconds"], args["reason"] = 0.0, nil
	tag, err := s.db.Exec(ctx, releaseSQL, args)
	if err != nil {
		return 0, fmt.Errorf("releasing %d claimed rows: %w", len(claims), sqlfile.Wrap("outbox/release", err))
	}
	return int(tag.RowsAffected()), nil
}

// Hold puts claimed rows back like Release, due only after delay, with
// reason as their last_error: what they need is missing in this deployment
// (their command type's queue), and claiming them again at once would only
// put them back again.
func (s *Store) Hold(ctx context.Context, claims []Claim, reason string, delay time.Duration) (int, error) {
	if len(claims) == 0 {
		return 0, nil
	}
	args := claimColumns(claims)
	args["delay_seconds"], args["reason"] = delay.Seconds(), reason
	tag, err := s.db.Exec(ctx, releaseSQL, args)
	if err != nil {
		return 0, fmt.Errorf("holding %d claimed rows: %w", len(claims), sqlfile.Wrap("outbox/release", err))
	}
	return int(tag.RowsAffected()), nil
}

// MarkUnsupported ends claimed rows that nothing can deliver.
func (s *Store) MarkUnsupported(ctx context.Context, claims []Claim, reason string) (int, error) {
	if len(claims) == 0 {
		return 0, nil
	}
	args := claimColumns(claims)
	args["reason"] = reason
	tag, err := s.db.Exec(ctx, unsupportedSQL, args)
	if err != nil {
		return 0, fmt.Errorf("marking %d rows unsupported: %w", len(claims), sqlfile.Wrap("outbox/mark_unsupported", err))
	}
	return int(tag.RowsAffected()), nil
}

// DeadLetterNoConnection ends claimed, not yet started rows that have no
// integration connection (claims whose ConnectionID is empty): dead_letter
// at once with a configuration_invalid conflict, the attempt not consumed.
// It returns how many it ended.
func (s *Store) DeadLetterNoConnection(ctx context.Context, claims []Claim) (int, error) {
	if len(claims) == 0 {
		return 0, nil
	}
	var n int
	args := claimColumns(claims)
	args["events_on"] = s.health.Events
	if err := s.db.QueryRow(ctx, noConnectionSQL, args).Scan(&n); err != nil {
		return 0, fmt.Errorf("dead-lettering %d rows without a connection: %w", len(claims), sqlfile.Wrap("outbox/dead_letter_no_connection", err))
	}
	return n, nil
}

// claimColumns are the claims as the arguments of the statements that take
// claimed rows: one array per column.
func claimColumns(claims []Claim) pgx.NamedArgs {
	var ids, orgs, tokens []string
	var conns []*string
	for _, c := range claims {
		ids = append(ids, c.ID)
		orgs = append(orgs, c.OrganizationID)
		tokens = append(tokens, c.ClaimToken)
		conns = append(conns, pgtx.Nullable(c.ConnectionID))
	}
	return pgx.NamedArgs{"ids": ids, "organization_ids": orgs, "claim_tokens": tokens, "connection_ids": conns}
}

// StartRequest names one delivered claim.
type StartRequest struct {
	OutboxID       string
	OrganizationID string
	ConnectionID   string
	ClaimToken     string
	// LeaseUntil is when the push ends at the latest, its result recorded:
	// a started job's lease is extended to it (never shortened). Zero keeps
	// the claim's lease.
	LeaseUntil time.Time
}

// Connection is the integration connection a job goes through.
type Connection struct {
	ID                  string
	LocationID          string
	Provider            string
	CredentialReference string
	Config              json.RawMessage
	// Unauthorized, when not empty, says why the connection needs
	// reauthorization (its connection_unauthorized conflict is open): no
	// call may go through it until the host reconnects it.
	Unauthorized string
}

// Job is a started job with what it needs to run.
type Job struct {
	ID              string
	OrganizationID  string
	ConnectionID    string
	CommandType     string
	LocalEntityType string
	LocalEntityID   string
	Payload         json.RawMessage
	IdempotencyKey  string
	AttemptCount    int
	ClaimToken      string
	// Connection is nil when the connection does not exist for the job's
	// organization.
	Connection *Connection
	// UnknownSince is when the row's first attempt whose outcome is
	// unknown started (its history's outcome_unknown attempts, the starts
	// no record ended); zero: none. Rerun says an operator reran the row
	// after it.
	UnknownSince time.Time
	Rerun        bool
}

// Start consumes the claims in one statement and returns the jobs it
// started, each with its connection (what a job's command needs beyond
// that, its command loads). A request whose token is stale, whose claim was already started
// or whose lease has expired is not returned: that delivery is a duplicate
// or too late and must do nothing. A started job's lease is extended to its
// LeaseUntil.
func (s *Store) Start(ctx context.Context, reqs []StartRequest) ([]Job, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	rows, err := s.routines.Query(ctx, s.db, start, startArgs(reqs))
	if err != nil {
		return nil, fmt.Errorf("starting %d jobs: %w", len(reqs), sqlfile.Wrap("outbox/start", err))
	}
	jobs, err := pgx.CollectRows(rows, scanJob)
	if err != nil {
		return nil, fmt.Errorf("starting %d jobs: %w", len(reqs), sqlfile.Wrap("outbox/start", err))
	}
	return jobs, nil
}

// startArgs are start.sql's arguments for reqs: one array per field.
func startArgs(reqs []StartRequest) pgx.NamedArgs {
	ids := make([]string, len(reqs))
	orgs := make([]string, len(reqs))
	tokens := make([]string, len(reqs))
	conns := make([]*string, len(reqs))
	until := make([]*time.Time, len(reqs))
	for i, r := range reqs {
		ids[i], orgs[i], tokens[i], conns[i] = r.OutboxID, r.OrganizationID, r.ClaimToken, pgtx.Nullable(r.ConnectionID)
		if !r.LeaseUntil.IsZero() {
			until[i] = &r.LeaseUntil
		}
	}
	return pgx.NamedArgs{"ids": ids, "organization_ids": orgs, "claim_tokens": tokens, "connection_ids": conns, "lease_until": until}
}

// scanJob reads a row of the start or the peek: the job, then its
// connection (none when the connection does not exist for the
// organization).
func scanJob(r pgx.CollectableRow) (Job, error) {
	var (
		j       Job
		c       Connection
		found   bool
		unknown *time.Time
	)
	err := r.Scan(&j.ID, &j.OrganizationID, &j.ConnectionID, &j.CommandType, &j.LocalEntityType,
		&j.LocalEntityID, &j.Payload, &j.IdempotencyKey, &j.AttemptCount, &j.ClaimToken,
		&found, &c.LocationID, &c.Provider, &c.CredentialReference, &c.Config, &c.Unauthorized,
		&unknown, &j.Rerun)
	if unknown != nil {
		j.UnknownSince = *unknown
	}
	if found {
		c.ID = j.ConnectionID
		j.Connection = &c
	}
	return j, err
}

// ErrNotFound is Peek's answer for a row that does not exist for the
// organization (another organization's row reads the same).
var ErrNotFound = errors.New("outbox row not found for the organization")

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Peek reads one row as Start would hand it to its command, writing
// nothing (the preview's read): ErrNotFound when the organization has no
// such row.
func Peek(ctx context.Context, q Querier, organizationID, outboxID string) (Job, error) {
	rows, err := q.Query(ctx, peekSQL, pgx.NamedArgs{"id": outboxID, "organization_id": organizationID})
	if err != nil {
		return Job{}, fmt.Errorf("reading outbox row %s: %w", outboxID, sqlfile.Wrap("outbox/peek", err))
	}
	j, err := pgx.CollectExactlyOneRow(rows, scanJob)
	if errors.Is(err, pgx.ErrNoRows) {
		return Job{}, ErrNotFound
	}
	if err != nil {
		return Job{}, fmt.Errorf("reading outbox row %s: %w", outboxID, sqlfile.Wrap("outbox/peek", err))
	}
	return j, nil
}

// Outcome is the result of one started job.
type Outcome struct {
	OutboxID       string
	OrganizationID string
	ConnectionID   string
	ClaimToken     string
	// LocationID is the connection's location, copied onto a conflict.
	LocationID string
	// Status is the row's next status: completed, uncertain, processing
	// (accepted by the provider), failed, unsupported or dead_letter.
	Status            Status
	ProviderReference string
	ProviderStatus    string
	// LastError is stored when set (already truncated and masked).
	LastError string
	// RetryIn is the delay before the next attempt of a failed row.
	RetryIn time.Duration
	// ConflictType and ConflictSummary describe the conflict of a
	// dead_letter row.
	ConflictType    ConflictType
	ConflictSummary string
	// The attempt-history row of the result: when the attempt's provider
	// call(s) started and finished (zero: the attempt ended before any call,
	// and the row's started_at and the recording time stand in), whether the
	// provider was called, and its last HTTP status (0: no HTTP response).
	CallStartedAt  time.Time
	CallFinishedAt time.Time
	ProviderCalled bool
	HTTPStatus     int
	// OutcomeUnknown marks the attempt as one whose call may have made the
	// command's document without our hearing of it (provider.Error's
	// OutcomeUnknown): a later attempt looks it up first.
	OutcomeUnknown bool
	// Circuit is CircuitSuccess or CircuitFailure when the job called the
	// provider; empty when it did not get that far.
	Circuit string
	// Uncharged gives the attempt back: the provider did not take the call
	// for a reason of the connection's, not the command's (its calls are
	// paused or paced, a 429). The row is retried after RetryIn with the
	// attempts it had; its attempt history still shows the try.
	Uncharged bool
	// WaitingFor is the outbox row an uncharged row waits for (its
	// command's dependency, e.g. another entity's push): when that row's
	// end is recorded, this one is due at once; RetryIn is only the latest
	// it is looked at again.
	WaitingFor string
}

// recordRow is one outcome as record.sql reads it (@outcomes, a JSON array
// of these rows, typed there by jsonb_to_recordset): empty values are null.
type recordRow struct {
	ID                string     `json:"id"`
	OrganizationID    string     `json:"organization_id"`
	ClaimToken        string     `json:"claim_token"`
	Status            Status     `json:"status"`
	ProviderReference *string    `json:"provider_reference"`
	ProviderStatus    *string    `json:"provider_status"`
	LastError         *string    `json:"last_error"`
	RetrySeconds      float64    `json:"retry_seconds"`
	ConflictType      *string    `json:"conflict_type"`
	ConflictSummary   *string    `json:"conflict_summary"`
	LocationID        *string    `json:"location_id"`
	ConnectionID      *string    `json:"connection_id"`
	StartedAt         *time.Time `json:"started_at"`
	FinishedAt        *time.Time `json:"finished_at"`
	ProviderCalled    bool       `json:"provider_called"`
	HTTPStatus        *int       `json:"http_status"`
	Circuit           *string    `json:"circuit"`
	Uncharged         bool       `json:"uncharged"`
	OutcomeUnknown    bool       `json:"outcome_unknown"`
	// NoConflict and Note: a result recorded as far as the host's tables
	// allow (Record): no conflict, and why in the attempt's history.
	NoConflict bool    `json:"no_conflict"`
	Note       *string `json:"note"`
	WaitingFor *string `json:"waiting_for"`
}

// newRecordRow is o as record.sql reads it; its times to the microsecond,
// as PostgreSQL keeps them.
func newRecordRow(o Outcome) recordRow {
	r := recordRow{ID: o.OutboxID, OrganizationID: o.OrganizationID, ClaimToken: o.ClaimToken, Status: o.Status,
		ProviderReference: pgtx.Nullable(o.ProviderReference), ProviderStatus: pgtx.Nullable(o.ProviderStatus),
		LastError: pgtx.Nullable(o.LastError), RetrySeconds: o.RetryIn.Seconds(),
		ConflictType: pgtx.Nullable(string(o.ConflictType)), ConflictSummary: pgtx.Nullable(o.ConflictSummary),
		LocationID: pgtx.Nullable(o.LocationID), ConnectionID: pgtx.Nullable(o.ConnectionID),
		ProviderCalled: o.ProviderCalled, Circuit: pgtx.Nullable(o.Circuit), Uncharged: o.Uncharged,
		OutcomeUnknown: o.OutcomeUnknown, WaitingFor: pgtx.Nullable(o.WaitingFor)}
	r.StartedAt, r.FinishedAt = microseconds(o.CallStartedAt), microseconds(o.CallFinishedAt)
	if o.HTTPStatus != 0 {
		code := o.HTTPStatus
		r.HTTPStatus = &code
	}
	return r
}

// microseconds is t as PostgreSQL keeps it (null when zero).
func microseconds(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.Truncate(time.Microsecond)
	return &t
}

// Record stores outcomes in one statement, each fenced by its claim token,
// with one attempt-history row per recorded outcome, and returns the ids it
// recorded (an outcome whose token is no longer current is not recorded,
// nor its attempt; nor is a repeat of a record that committed) and the
// circuits the results changed.
func (s *Store) Record(ctx context.Context, outcomes []Outcome) (Recorded, error) {
	if len(outcomes) == 0 {
		return Recorded{}, nil
	}
	max, err := s.lengths.get(ctx, s.db)
	if err != nil {
		return Recorded{}, err
	}
	rows := make([]recordRow, len(outcomes))
	for i, o := range outcomes {
		rows[i] = newRecordRow(o).fit(max)
	}
	r, err := s.recordBatch(ctx, rows)
	if isTooLong(err) {
		// The host shortened a column since the lengths were read.
		s.lengths.reset()
		if max, err = s.lengths.get(ctx, s.db); err != nil {
			return Recorded{}, err
		}
		for i := range rows {
			rows[i] = rows[i].fit(max)
		}
		r, err = s.recordBatch(ctx, rows)
	}
	if err == nil || !hostschema.IsSchemaError(err) {
		return r, err
	}
	// The host's tables refuse what one outcome writes (a NOT NULL column
	// added to the conflicts, a check): the others must not go with it.
	// Each is recorded alone; one still refused is recorded as far as the
	// host's tables allow (its status, without its conflict and its
	// connection's health, the refusal in its attempt's history); one
	// refused even so stays under its lease, recovered when it expires.
	r = Recorded{Failed: err}
	for _, row := range rows {
		one, err := s.record(ctx, []recordRow{row})
		if err != nil && hostschema.IsSchemaError(err) {
			bare := row
			bare.NoConflict, bare.Circuit = true, nil
			bare.Note = pgtx.Nullable("recorded without its conflict and connection health: " + err.Error())
			if one, err = s.record(ctx, []recordRow{bare}); err == nil && len(one.IDs) > 0 {
				r.Degraded = append(r.Degraded, row.ID)
			}
		}
		if err != nil {
			r.Refused = append(r.Refused, RefusedResult{ID: row.ID, Err: err})
			continue
		}
		r.IDs = append(r.IDs, one.IDs...)
		r.Circuits = append(r.Circuits, one.Circuits...)
	}
	return r, nil
}

// recordBatch records rows in one statement: a batch of successes through
// record_completed.sql, the lighter statement, unless a connection of
// theirs has failures, an open circuit or a failing period to clear; every
// other batch, and that one, through record.sql.
func (s *Store) recordBatch(ctx context.Context, rows []recordRow) (Recorded, error) {
	if s.recordSQLOnly || !allSucceeded(rows) {
		return s.record(ctx, rows)
	}
	r, held, err := s.recordCompleted(ctx, rows)
	if err != nil || !held {
		return r, err
	}
	return s.record(ctx, rows)
}

// allSucceeded reports whether every row is a success record_completed.sql
// records as record.sql would: completed, its circuit a success or none,
// its attempt charged, waiting for nothing.
func allSucceeded(rows []recordRow) bool {
	for _, r := range rows {
		if r.Status != StatusCompleted || (r.Circuit != nil && *r.Circuit != CircuitSuccess) || r.Uncharged || r.WaitingFor != nil {
			return false
		}
	}
	return true
}

// recordCompleted runs record_completed.sql for rows; held: it recorded
// nothing, a connection of theirs having something a success clears.
func (s *Store) recordCompleted(ctx context.Context, results []recordRow) (r Recorded, held bool, err error) {
	n := len(results)
	outcomesJSON, err := json.Marshal(results)
	if err != nil {
		return Recorded{}, false, fmt.Errorf("recording %d results: %w", n, err)
	}
	rows, err := s.routines.Query(ctx, s.db, recordCompleted, pgx.NamedArgs{"outcomes": string(outcomesJSON)})
	if err != nil {
		return Recorded{}, false, fmt.Errorf("recording %d results: %w", n, sqlfile.Wrap("outbox/record_completed", err))
	}
	for rows.Next() {
		var (
			id      *string
			blocked bool
		)
		if err := rows.Scan(&id, &blocked); err != nil {
			rows.Close()
			return Recorded{}, false, fmt.Errorf("recording %d results: %w", n, sqlfile.Wrap("outbox/record_completed", err))
		}
		if blocked {
			held = true
		} else if id != nil {
			r.IDs = append(r.IDs, *id)
		}
	}
	if err := rows.Err(); err != nil {
		return Recorded{}, false, fmt.Errorf("recording %d results: %w", n, sqlfile.Wrap("outbox/record_completed", err))
	}
	return r, held, nil
}

// record runs record.sql for rows.
func (s *Store) record(ctx context.Context, results []recordRow) (Recorded, error) {
	n := len(results)
	outcomesJSON, err := json.Marshal(results)
	if err != nil {
		return Recorded{}, fmt.Errorf("recording %d results: %w", n, err)
	}
	rows, err := s.routines.Query(ctx, s.db, record, pgx.NamedArgs{
		"outcomes":                       string(outcomesJSON),
		"failure_threshold":              s.circuit.FailureThreshold,
		"cooldown_seconds":               s.circuit.Cooldown.Seconds(),
		"events_on":                      s.health.Events,
		"failing_after_seconds":          s.health.FailingAfter.Seconds(),
		"disable_after_seconds":          s.health.DisableAfter.Seconds(),
		"disable_min_span_seconds":       s.health.DisableMinSpan.Seconds(),
		"command_failing_after_attempts": s.health.CommandFailingAfterAttempts,
	})
	if err != nil {
		return Recorded{}, fmt.Errorf("recording %d results: %w", n, sqlfile.Wrap("outbox/record", err))
	}
	var r Recorded
	for rows.Next() {
		var (
			id, conn, transition *string
			until                *time.Time
		)
		if err := rows.Scan(&id, &conn, &transition, &until); err != nil {
			rows.Close()
			return Recorded{}, fmt.Errorf("recording %d results: %w", n, sqlfile.Wrap("outbox/record", err))
		}
		if id != nil {
			r.IDs = append(r.IDs, *id)
			continue
		}
		c := CircuitChange{ConnectionID: *conn, Transition: *transition}
		if until != nil {
			c.OpenUntil = *until
		}
		r.Circuits = append(r.Circuits, c)
	}
	if err := rows.Err(); err != nil {
		return Recorded{}, fmt.Errorf("recording %d results: %w", n, sqlfile.Wrap("outbox/record", err))
	}
	return r, nil
}
