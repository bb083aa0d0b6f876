package outbox_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"pgregory.net/rapid"

	"integration-outbox/internal/outbox"
)

// The delivery protocol as a state machine, against the real PostgreSQL:
// random interleavings of dispatch runs (with the in-flight caps), deliveries
// (duplicate, late, after the lease expired), crashes before and during a
// provider call, provider outcomes, reruns, messages moved to the
// dead-letter queue and released by its consumer (sometimes twice), and time
// passing (which opens, half-opens and closes circuits), checking after every
// step that
//
//   - no command ever has two provider calls in flight, and nothing
//     reclaims or dead-letters a row whose provider call is in flight;
//   - only the current claim records a result;
//   - no row is lost: each is terminal, or waits with a lease, a due time,
//     a provider status or an open conflict;
//   - no row reaches dead_letter from expired leases alone while the fleet
//     keeps up (nothing crashed, nothing waited past its lease);
//   - the caps hold, and an open circuit's rows are not claimed, with one
//     probe at most for a half-open one, even when dispatch runs overlap
//     (their claims are drawn with and without the global caps, on
//     connections with and without a maxInFlight of their own);
//   - per-entity order: on an ordered connection no two commands of one
//     (connection, entity) are in flight at once, and no command is claimed
//     while an older one of its entity waits;
//   - exactly once at the ledger: the provider is modelled as a ledger
//     that makes a document for a create, replays a repeated key, and
//     forgets a key some time after its first use (never sooner than the
//     replay window the push trusts); a create's answer may be lost after
//     the document was made, and a push may crash mid-call. Each push looks
//     the document up first where the job says an earlier attempt's outcome
//     is unknown and the window has passed or the row was rerun (as the
//     accounting providers do, internal/provider), and no command ever has
//     two documents.
//
// OUTBOX_PROTOCOL_REVERT_LEASE_FIX=1 starts jobs with the start statement
// that came before the lease check (no lease check at start, no lease
// extension): the check then fails at once, a row's claim taken while its
// provider call is in flight (and, without that check, two provider calls in
// flight for one command).

// legacyStartSQL is the start statement that came before the lease check,
// its loading of the job's connection and entity left out (the property
// counts started rows only): it neither checked nor extended the lease. It
// consumes the claim in integration_outbox_starts, as the record requires.
const legacyStartSQL = `
with req as (
    select * from unnest($1::text[]::uuid[], $2::text[]::uuid[], $3::text[]::uuid[], $4::text[]::uuid[]) as r(id, organization_id, claim_token, connection_id)
)
insert into integration_outbox_starts (claim_token, outbox_id, organization_id, started_at)
select o.claim_token, o.id, o.organization_id, now()
from req
join external_integration_outbox o
    on o.id = req.id and o.organization_id = req.organization_id
   and o.integration_connection_id is not distinct from req.connection_id
   and o.claim_token = req.claim_token
where o.status = 'processing'
on conflict (claim_token) do nothing
returning outbox_id`

const (
	propMaxAttempts = 3
	propLease       = 60 * time.Second
	propPush        = 30 * time.Second // a push invocation's deadline after its start
	propMaxInFlight = 4
	propConnMax     = 2
	propThreshold   = 2
	propCooldown    = 30 * time.Second
)

type propMessage struct {
	claim outbox.Claim
	// leaseEnd is the claim's lease end on the test's clock.
	leaseEnd time.Duration
}

type propCall struct {
	claim    outbox.Claim
	job      outbox.Job
	deadline time.Duration // on the test's clock: the invocation ends (crashes) then
}

// ledgerModel is the provider as a ledger: documents per command (row),
// and the keys it replays, each with the test clock of its first use.
type ledgerModel struct {
	window, forget time.Duration // what the push trusts; when the provider forgets a key
	docs           map[string]int
	keys           map[string]time.Duration
}

type protocol struct {
	pool   *pgxpool.Pool
	store  *outbox.Store
	revert bool
	rows   []string
	conns  []string
	// The caps of this case (0: none), and the connections with a
	// maxInFlight of their own (1) and those that opt out of per-entity
	// order.
	maxInFlight, connMax int
	ownLimit, unordered  map[string]bool

	clock    time.Duration     // how far the test moved the database's time
	current  map[string]string // row → its current claim token
	queue    []propMessage
	calls    []propCall
	excused  map[string]bool // rows whose lease may expire: a crash, or a message left past its lease
	after    string
	started  int
	recorded int
	ledger   ledgerModel
}

func TestDeliveryProtocolProperties(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	revert := os.Getenv("OUTBOX_PROTOCOL_REVERT_LEASE_FIX") == "1"
	rapid.Check(t, func(rt *rapid.T) {
		p := &protocol{pool: f.Pool, revert: revert,
			store:   outbox.NewStore(f.Pool).WithCircuit(outbox.Circuit{FailureThreshold: propThreshold, Cooldown: propCooldown}),
			current: map[string]string{}, excused: map[string]bool{}, ownLimit: map[string]bool{}, unordered: map[string]bool{},
			maxInFlight: rapid.SampledFrom([]int{0, propMaxInFlight}).Draw(rt, "DISPATCH_MAX_IN_FLIGHT"),
			connMax:     rapid.SampledFrom([]int{0, propConnMax}).Draw(rt, "CONNECTION_MAX_IN_FLIGHT")}
		window := rapid.SampledFrom([]time.Duration{0, 61 * time.Second, 10 * time.Minute}).Draw(rt, "replayWindowSeconds")
		p.ledger = ledgerModel{window: window, docs: map[string]int{}, keys: map[string]time.Duration{},
			forget: window + rapid.SampledFrom([]time.Duration{0, 31 * time.Second, time.Hour}).Draw(rt, "the provider forgets keys after the window by")}
		p.init(rt)
		rt.Repeat(map[string]func(*rapid.T){
			"dispatch":        p.dispatch,
			"deliver":         p.deliver,
			"finish":          p.finish,
			"crashBeforeCall": p.crashBeforeCall,
			"crashDuringCall": p.crashDuringCall,
			"advance":         p.advance,
			"rerun":           p.rerun,
			"deadLetter":      p.deadLetter,
			"":                p.check,
		})
	})
}

func (p *protocol) exec(rt *rapid.T, sql string, args ...any) {
	rt.Helper()
	if _, err := p.pool.Exec(context.Background(), sql, args...); err != nil {
		rt.Fatalf("%s: %v", strings.TrimSpace(sql), err)
	}
}

func (p *protocol) init(rt *rapid.T) {
	ctx := context.Background()
	p.exec(rt, `truncate external_integration_outbox, external_integration_conflicts, integration_connections,
		purchase_orders, purchase_order_lines, integration_outbox_connection_health, external_integration_attempts,
		integration_outbox_starts, external_integration_rerun_audit`)
	orgs := rapid.IntRange(1, 3).Draw(rt, "organizations")
	for o := range orgs {
		var org, po string
		if err := p.pool.QueryRow(ctx, `insert into purchase_orders (organization_id, order_number)
			values (gen_random_uuid(), 'PO') returning organization_id::text, id::text`).Scan(&org, &po); err != nil {
			rt.Fatal(err)
		}
		for range rapid.IntRange(1, 2).Draw(rt, fmt.Sprintf("connections of %d", o)) {
			var conn string
			own := rapid.Bool().Draw(rt, "maxInFlight 1 of its own")
			unordered := rapid.Bool().Draw(rt, "ordered false")
			cfg := map[string]any{}
			if own {
				cfg["maxInFlight"] = 1
			}
			if unordered {
				cfg["ordered"] = false
			}
			if err := p.pool.QueryRow(ctx, `insert into integration_connections (organization_id, provider, config_json)
				values ($1, 'sandbox', $2) returning id::text`, org, cfg).Scan(&conn); err != nil {
				rt.Fatal(err)
			}
			p.conns = append(p.conns, conn)
			p.ownLimit[conn], p.unordered[conn] = own, unordered
			for range rapid.IntRange(1, 4).Draw(rt, "rows") {
				var id string
				if err := p.pool.QueryRow(ctx, `insert into external_integration_outbox (organization_id,
						integration_connection_id, provider, command_type, local_entity_type, local_entity_id,
						payload_json, idempotency_key)
					values ($1, $2, 'sandbox', 'push_purchase_order', 'purchase_order', $3,
						'{"externalSupplierId": "S"}', gen_random_uuid()::text) returning id::text`,
					org, conn, po).Scan(&id); err != nil {
					rt.Fatal(err)
				}
				p.rows = append(p.rows, id)
			}
		}
	}
}

// dispatch is one to three dispatch runs' claims at once (a schedule tick
// and wake-ups overlap): the sweep, then one batch each.
func (p *protocol) dispatch(rt *rapid.T) {
	ctx := context.Background()
	open := p.openCircuits(rt)
	runs := rapid.IntRange(1, 3).Draw(rt, "overlapping runs")
	params := make([]outbox.ClaimParams, runs)
	for i := range params {
		params[i] = outbox.ClaimParams{Limit: rapid.IntRange(1, 6).Draw(rt, "limit"), MaxAttempts: propMaxAttempts,
			Lease: propLease, MaxInFlight: p.maxInFlight, ConnectionMaxInFlight: p.connMax, After: p.after}
	}
	if _, err := p.store.DeadLetterExpired(ctx, params[0]); err != nil {
		rt.Fatal(err)
	}
	accepted := p.acceptedRows(rt)
	batches := make([]outbox.Batch, runs)
	errs := make([]error, runs)
	var wg sync.WaitGroup
	for i := range params {
		wg.Go(func() { batches[i], errs[i] = p.store.ClaimBatch(ctx, params[i]) })
	}
	wg.Wait()
	for i, b := range batches {
		if errs[i] != nil {
			rt.Fatal(errs[i])
		}
		p.after = b.NextAfter(p.after)
		for _, c := range b.Claims {
			if open[c.ConnectionID] {
				rt.Fatalf("row %s claimed while the circuit of its connection is open", c.ID)
			}
			p.current[c.ID] = c.ClaimToken
			p.queue = append(p.queue, propMessage{claim: c, leaseEnd: p.clock + propLease})
			if !accepted[c.ID] {
				p.checkOlderWaits(rt, c)
			}
		}
	}
	p.checkCaps(rt)
}

// acceptedRows are the rows the provider accepted, awaiting their
// follow-up: in flight already, so an older command requeued since waits
// behind them.
func (p *protocol) acceptedRows(rt *rapid.T) map[string]bool {
	rows, err := p.pool.Query(context.Background(), `select id::text from external_integration_outbox
		where status = 'processing' and provider_status is not null`)
	if err != nil {
		rt.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		rt.Fatal(err)
	}
	out := map[string]bool{}
	for _, id := range ids {
		out[id] = true
	}
	return out
}

// checkOlderWaits fails when the claimed row c has an older command of its
// entity still waiting on an ordered connection.
func (p *protocol) checkOlderWaits(rt *rapid.T, c outbox.Claim) {
	if p.unordered[c.ConnectionID] {
		return
	}
	var older int
	if err := p.pool.QueryRow(context.Background(), `
		select count(*)::int from external_integration_outbox x
		join external_integration_outbox o on o.id = $1
		where x.integration_connection_id = o.integration_connection_id and x.local_entity_id = o.local_entity_id
		  and x.id <> o.id and (x.status in ('queued', 'failed')
		    or (x.status = 'processing' and x.provider_status is null and x.lease_expires_at < now()))
		  and (x.created_at, x.id) < (o.created_at, o.id)`, c.ID).Scan(&older); err != nil {
		rt.Fatal(err)
	}
	if older > 0 {
		rt.Fatalf("row %s claimed while %d older commands of its entity wait", c.ID, older)
	}
}

// deliver hands a queued message to a push invocation; sometimes SQS
// delivers it again later (a duplicate).
func (p *protocol) deliver(rt *rapid.T) {
	if len(p.queue) == 0 {
		rt.Skip("no message")
	}
	i := rapid.IntRange(0, len(p.queue)-1).Draw(rt, "message")
	m := p.queue[i]
	if !rapid.Bool().Draw(rt, "delivered again later") {
		p.queue = slices.Delete(p.queue, i, i+1)
	}
	job, started := p.start(rt, m.claim)
	if !started {
		return
	}
	if m.claim.ClaimToken != p.current[m.claim.ID] {
		rt.Fatalf("row %s started under a claim that is no longer current", m.claim.ID)
	}
	for _, c := range p.calls {
		if c.claim.ID == m.claim.ID {
			rt.Fatalf("row %s: a second provider call started while one is in flight (claims %s and %s)",
				m.claim.ID, c.claim.ClaimToken, m.claim.ClaimToken)
		}
	}
	p.started++
	p.calls = append(p.calls, propCall{claim: m.claim, job: job, deadline: p.clock + propPush})
}

func (p *protocol) start(rt *rapid.T, c outbox.Claim) (outbox.Job, bool) {
	ctx := context.Background()
	if p.revert {
		rows, err := p.pool.Query(ctx, legacyStartSQL, []string{c.ID}, []string{c.OrganizationID},
			[]string{c.ClaimToken}, []string{c.ConnectionID})
		if err != nil {
			rt.Fatal(err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		rows.Close()
		return outbox.Job{}, n == 1
	}
	jobs, err := p.store.Start(ctx, []outbox.StartRequest{{OutboxID: c.ID, OrganizationID: c.OrganizationID,
		ConnectionID: c.ConnectionID, ClaimToken: c.ClaimToken, LeaseUntil: p.now(rt).Add(propPush)}})
	if err != nil {
		rt.Fatal(err)
	}
	if len(jobs) != 1 {
		return outbox.Job{}, false
	}
	return jobs[0], true
}

// lookUp is the accounting providers' rule (internal/provider,
// lookUpFirst): an earlier attempt's outcome is unknown, and the window
// has passed since it started, or the row was rerun since.
func (p *protocol) lookUp(rt *rapid.T, j outbox.Job) bool {
	if j.UnknownSince.IsZero() {
		return false
	}
	return j.Rerun || p.ledger.window == 0 || p.now(rt).Sub(j.UnknownSince) >= p.ledger.window
}

// create is the ledger's answer to a create of the row: the key's replay
// while it remembers it, else a new document.
func (p *protocol) create(row string) {
	if first, ok := p.ledger.keys[row]; ok && p.clock-first < p.ledger.forget {
		return
	}
	p.ledger.docs[row]++
	p.ledger.keys[row] = p.clock
}

// now is the database's clock as the test moved it... the real clock:
// moving time shifts the rows' timestamps instead.
func (p *protocol) now(rt *rapid.T) time.Time {
	var t time.Time
	if err := p.pool.QueryRow(context.Background(), `select now()`).Scan(&t); err != nil {
		rt.Fatal(err)
	}
	return t
}

// finish ends a provider call with an outcome and records it.
func (p *protocol) finish(rt *rapid.T) {
	if len(p.calls) == 0 {
		rt.Skip("no call in flight")
	}
	i := rapid.IntRange(0, len(p.calls)-1).Draw(rt, "call")
	c := p.calls[i]
	p.calls = slices.Delete(p.calls, i, i+1)
	o := outbox.Outcome{OutboxID: c.claim.ID, OrganizationID: c.claim.OrganizationID,
		ConnectionID: c.claim.ConnectionID, ClaimToken: c.claim.ClaimToken}
	outcome := rapid.SampledFrom([]string{"completed", "retryable", "answer lost", "accepted", "rejected", "uncertain"}).Draw(rt, "outcome")
	if !p.revert && p.lookUp(rt, c.job) && p.ledger.docs[c.claim.ID] > 0 {
		outcome = "found"
	}
	switch outcome {
	case "found":
		o.Status, o.ProviderStatus, o.Circuit = outbox.StatusCompleted, "reconciled", outbox.CircuitSuccess
	case "completed", "answer lost":
		p.create(c.claim.ID)
		o.Status, o.Circuit = outbox.StatusCompleted, outbox.CircuitSuccess
		if outcome == "answer lost" {
			o.OutcomeUnknown, o.Circuit = true, outbox.CircuitFailure
			if c.claim.AttemptCount >= propMaxAttempts {
				o.Status, o.ConflictType, o.ConflictSummary = outbox.StatusDeadLetter, "provider_rejected", "attempts exhausted"
			} else {
				o.Status, o.LastError, o.RetryIn = outbox.StatusFailed, "EOF", 30*time.Second
			}
		}
	case "uncertain":
		o.Status, o.Circuit = outbox.StatusUncertain, outbox.CircuitSuccess
	case "accepted":
		o.Status, o.ProviderStatus, o.RetryIn, o.Circuit = outbox.StatusProcessing, "accepted", time.Hour, outbox.CircuitSuccess
	case "rejected":
		o.Status, o.ConflictType, o.ConflictSummary, o.Circuit = outbox.StatusDeadLetter, "provider_rejected", "rejected", outbox.CircuitSuccess
	case "retryable":
		o.Circuit = outbox.CircuitFailure
		if c.claim.AttemptCount >= propMaxAttempts {
			o.Status, o.ConflictType, o.ConflictSummary = outbox.StatusDeadLetter, "provider_rejected", "attempts exhausted"
		} else {
			o.Status, o.LastError, o.RetryIn = outbox.StatusFailed, "503", 30*time.Second
		}
	}
	r, err := p.store.Record(context.Background(), []outbox.Outcome{o})
	if err != nil {
		rt.Fatal(err)
	}
	current := p.current[c.claim.ID] == c.claim.ClaimToken
	if recorded := len(r.IDs) == 1; recorded != current {
		rt.Fatalf("row %s: result recorded %v, but its claim current %v", c.claim.ID, recorded, current)
	}
	if current {
		p.recorded++
		delete(p.current, c.claim.ID)
	}
}

func (p *protocol) crashBeforeCall(rt *rapid.T) {
	if len(p.queue) == 0 {
		rt.Skip("no message")
	}
	i := rapid.IntRange(0, len(p.queue)-1).Draw(rt, "lost message")
	p.excused[p.queue[i].claim.ID] = true
	p.queue = slices.Delete(p.queue, i, i+1)
}

func (p *protocol) crashDuringCall(rt *rapid.T) {
	if len(p.calls) == 0 {
		rt.Skip("no call in flight")
	}
	i := rapid.IntRange(0, len(p.calls)-1).Draw(rt, "crashed call")
	if c := p.calls[i]; !p.revert && rapid.Bool().Draw(rt, "the create reached the ledger") &&
		!(p.lookUp(rt, c.job) && p.ledger.docs[c.claim.ID] > 0) {
		p.create(c.claim.ID)
	}
	p.excused[p.calls[i].claim.ID] = true
	p.calls = slices.Delete(p.calls, i, i+1)
}

// advance moves time on by shifting every timestamp of the outbox and the
// circuits back. Invocations past their deadline are killed; messages left
// in the queue past their lease excuse their rows' expiry.
func (p *protocol) advance(rt *rapid.T) {
	d := rapid.SampledFrom([]time.Duration{5 * time.Second, 31 * time.Second, 61 * time.Second, 10 * time.Minute}).Draw(rt, "advance")
	p.exec(rt, `update external_integration_outbox set lease_expires_at = lease_expires_at - $1::interval,
		next_attempt_at = next_attempt_at - $1::interval, created_at = created_at - $1::interval`, d)
	p.exec(rt, `update integration_outbox_connection_health set open_until = open_until - $1::interval`, d)
	p.exec(rt, `update external_integration_attempts set started_at = started_at - $1::interval,
		finished_at = finished_at - $1::interval, created_at = created_at - $1::interval`, d)
	p.exec(rt, `update integration_outbox_starts set started_at = started_at - $1::interval, created_at = created_at - $1::interval`, d)
	p.exec(rt, `update external_integration_rerun_audit set created_at = created_at - $1::interval`, d)
	p.clock += d
	p.calls = slices.DeleteFunc(p.calls, func(c propCall) bool {
		if c.deadline <= p.clock {
			p.excused[c.claim.ID] = true // the invocation was killed at its deadline
			return true
		}
		return false
	})
	for _, m := range p.queue {
		if m.leaseEnd <= p.clock {
			p.excused[m.claim.ID] = true
		}
	}
}

// rerun requeues a failed, dead_letter or uncertain row with fresh attempts
// and resolves its conflict, as the rerun function does.
func (p *protocol) rerun(rt *rapid.T) {
	id := rapid.SampledFrom(p.rows).Draw(rt, "rerun row")
	p.exec(rt, `with r as (
			update external_integration_outbox set status = 'queued', attempt_count = 0, next_attempt_at = null,
				claim_token = null, lease_expires_at = null, updated_at = now()
			where id = $1 and status in ('failed', 'dead_letter', 'uncertain') returning id)
		, audit as (
			insert into external_integration_rerun_audit (organization_id, reason, payload, affected_ids)
			select o.organization_id, 'protocol test', '{}', array[o.id] from external_integration_outbox o where o.id in (select id from r))
		update external_integration_conflicts set status = 'resolved', resolved_at = now()
		where outbox_id in (select id from r) and status = 'open'`, id)
	if _, ok := p.current[id]; ok {
		var status string
		if err := p.pool.QueryRow(context.Background(), `select status from external_integration_outbox where id = $1`, id).Scan(&status); err != nil {
			rt.Fatal(err)
		}
		if status == "queued" {
			delete(p.current, id)
		}
	}
}

// deadLetter moves a queued message to the dead-letter queue (the push
// function failed on all its deliveries) and runs the dead-letter
// consumer's release on it, sometimes twice (SQS delivers at least once).
// The release takes the row only while it is that message's current claim
// and no provider call of it can be running; check then verifies that no
// call in flight lost its claim.
func (p *protocol) deadLetter(rt *rapid.T) {
	if len(p.queue) == 0 {
		rt.Skip("no message")
	}
	ctx := context.Background()
	i := rapid.IntRange(0, len(p.queue)-1).Draw(rt, "dead-lettered message")
	m := p.queue[i]
	p.queue = slices.Delete(p.queue, i, i+1)
	msg := outbox.DeadLetteredMessage{OutboxID: m.claim.ID, OrganizationID: m.claim.OrganizationID,
		ConnectionID: m.claim.ConnectionID, ClaimToken: m.claim.ClaimToken}
	var status, token string
	var unstarted, answered bool
	if err := p.pool.QueryRow(ctx, `select status, coalesce(claim_token::text, ''),
			not exists (select 1 from integration_outbox_starts s where s.claim_token = o.claim_token and s.started_at is not null),
			provider_status is not null
		from external_integration_outbox o where id = $1`, m.claim.ID).Scan(&status, &token, &unstarted, &answered); err != nil {
		rt.Fatal(err)
	}
	released, err := p.store.ReleaseDeadLettered(ctx, []outbox.DeadLetteredMessage{msg}, propMaxAttempts)
	if err != nil {
		rt.Fatal(err)
	}
	if len(released) == 1 {
		if p.current[m.claim.ID] != m.claim.ClaimToken {
			rt.Fatalf("row %s released by a dead-letter message whose claim is not current", m.claim.ID)
		}
		delete(p.current, m.claim.ID)
	} else if status == "processing" && token == m.claim.ClaimToken && unstarted && !answered {
		rt.Fatalf("row %s not released though it is still the unstarted claim of its dead-letter message", m.claim.ID)
	}
	if rapid.Bool().Draw(rt, "dead-letter message delivered twice") {
		again, err := p.store.ReleaseDeadLettered(ctx, []outbox.DeadLetteredMessage{msg}, propMaxAttempts)
		if err != nil {
			rt.Fatal(err)
		}
		if len(again) != 0 {
			rt.Fatalf("row %s released twice by the same dead-letter message", m.claim.ID)
		}
	}
	p.checkCaps(rt)
}

func (p *protocol) openCircuits(rt *rapid.T) map[string]bool {
	rows, err := p.pool.Query(context.Background(), `select connection_id::text from integration_outbox_connection_health
		where open_until > now()`)
	if err != nil {
		rt.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			rt.Fatal(err)
		}
		out[c] = true
	}
	return out
}

func (p *protocol) checkCaps(rt *rapid.T) {
	var total, widest, probes int
	if err := p.pool.QueryRow(context.Background(), `
		with leased as (
			select integration_connection_id as conn from external_integration_outbox
			where status = 'processing' and provider_status is null and lease_expires_at > now())
		select (select count(*) from leased)::int,
			coalesce((select max(n) from (select count(*) as n from leased group by conn) x), 0)::int,
			coalesce((select max(n) from (select count(*) as n from leased l
				join integration_outbox_connection_health h on h.connection_id = l.conn and h.open_until is not null
				group by l.conn) y), 0)::int`).Scan(&total, &widest, &probes); err != nil {
		rt.Fatal(err)
	}
	if p.maxInFlight > 0 && total > p.maxInFlight {
		rt.Fatalf("%d rows leased, above DISPATCH_MAX_IN_FLIGHT %d", total, p.maxInFlight)
	}
	if p.connMax > 0 && widest > p.connMax {
		rt.Fatalf("%d rows of one connection leased, above CONNECTION_MAX_IN_FLIGHT %d", widest, p.connMax)
	}
	for conn, own := range p.ownLimit {
		var n int
		if err := p.pool.QueryRow(context.Background(), `select count(*)::int from external_integration_outbox
			where integration_connection_id = $1 and status = 'processing' and provider_status is null
			  and lease_expires_at > now()`, conn).Scan(&n); err != nil {
			rt.Fatal(err)
		}
		if own && n > 1 {
			rt.Fatalf("%d rows of connection %s leased, above its own maxInFlight 1", n, conn)
		}
	}
	if probes > 1 {
		t := "rows"
		rt.Fatalf("%d %s of a connection with a tripped circuit in flight, want at most one probe", probes, t)
	}
}

// check runs after every step: no row is lost, and none reached dead_letter
// from expired leases alone while the fleet kept up.
func (p *protocol) check(rt *rapid.T) {
	rows, err := p.pool.Query(context.Background(), `
		select o.id::text, o.status, o.attempt_count, o.lease_expires_at is not null, o.next_attempt_at is not null,
			o.provider_status is not null, coalesce(o.last_error, ''),
			exists (select 1 from external_integration_conflicts c where c.outbox_id = o.id and c.status = 'open')
		from external_integration_outbox o`)
	if err != nil {
		rt.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var (
			id, status, lastError                     string
			attempts                                  int
			leased, due, providerStatus, openConflict bool
		)
		if err := rows.Scan(&id, &status, &attempts, &leased, &due, &providerStatus, &lastError, &openConflict); err != nil {
			rt.Fatal(err)
		}
		n++
		switch status {
		case "queued", "failed":
			if attempts >= propMaxAttempts {
				rt.Fatalf("row %s %s with no attempts left: nothing will ever take it", id, status)
			}
		case "processing":
			if !leased && !(providerStatus && due) {
				rt.Fatalf("row %s processing without a lease or a due follow-up", id)
			}
		case "dead_letter":
			if !openConflict {
				rt.Fatalf("row %s in dead_letter without an open conflict", id)
			}
			if strings.Contains(lastError, "lease of the last attempt expired") && !p.excused[id] {
				rt.Fatalf("row %s reached dead_letter from expired leases alone while the fleet kept up", id)
			}
		case "completed", "uncertain":
		default:
			rt.Fatalf("row %s in status %q", id, status)
		}
	}
	if err := rows.Err(); err != nil {
		rt.Fatal(err)
	}
	if n != len(p.rows) {
		rt.Fatalf("%d rows in the outbox, want %d", n, len(p.rows))
	}
	for row, docs := range p.ledger.docs {
		if docs > 1 {
			rt.Fatalf("row %s has %d documents at the ledger (trusted window %s, keys forgotten after %s)",
				row, docs, p.ledger.window, p.ledger.forget)
		}
	}
	// Per-entity order: one command of an entity in flight at a time (a
	// row whose lease expired is not: it waits to be reclaimed).
	var conn, entity string
	var inFlight int
	err = p.pool.QueryRow(context.Background(), `select integration_connection_id::text, local_entity_id::text, count(*)::int
		from external_integration_outbox
		where status = 'processing' and (provider_status is not null or lease_expires_at >= now())
		group by 1, 2 having count(*) > 1 limit 1`).Scan(&conn, &entity, &inFlight)
	if err == nil && !p.unordered[conn] {
		rt.Fatalf("%d commands of entity %s in flight at once on ordered connection %s", inFlight, entity, conn)
	}
	// A live push keeps its claim: nothing reclaims or dead-letters a row
	// whose provider call is in flight.
	for _, c := range p.calls {
		var status, token string
		if err := p.pool.QueryRow(context.Background(), `select status, coalesce(claim_token::text, '')
			from external_integration_outbox where id = $1`, c.claim.ID).Scan(&status, &token); err != nil {
			rt.Fatal(err)
		}
		if status != "processing" || token != c.claim.ClaimToken {
			rt.Fatalf("row %s: its claim was taken (now %s, token %s) while its provider call is in flight",
				c.claim.ID, status, token)
		}
	}
}
