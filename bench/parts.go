package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/outbox"
	"integration-outbox/internal/purchaseorder"
)

// The churn's statements alone: the churn's work (the host's write, the
// claim, each group's start, load and record; the legacy worker's insert,
// claim and three statements per job) run one statement at a time, with
// nothing else running, over a set of connections in turn, each
// statement's server CPU read from its backend's /proc/<pid>/schedstat
// before and after it. What the churn's CPU per command is made of, without
// the concurrency that makes its execution times wall times; twice: with
// the plans the connections keep, and with an ANALYZE of the tables the
// statements write every partsAnalyzeEvery commands, after which each
// connection plans its statements again (as after autovacuum's).
const (
	partsOutboxRows   = 40000
	partsConns        = churnPoolSize
	partsWarmup       = 20  // cycles of claimLimit commands, not measured
	partsCycles       = 200 // measured cycles
	partsAnalyzeEvery = 2500
)

// partsVariants are the variants measured: ours, the legacy worker, and
// ours with every record through record.sql (the build before
// record_completed.sql).
var partsVariants = []string{churnOurs, churnLegacy, churnRecordSQL}

// partsResult is the measurement.
type partsResult struct {
	Rows, Conns, Commands, AnalyzeEvery int
	// Kept and Analyzed are the two passes, by variant: the plans kept,
	// and an ANALYZE every AnalyzeEvery commands.
	Kept, Analyzed map[string]partsCost
}

// partsCost is one variant's pass: the commands it completed and each
// statement's backend CPU.
type partsCost struct {
	Completed int
	CPU       map[string]time.Duration
}

// per is part's CPU per completed command, in µs ("" for the total).
func (c partsCost) per(part string) float64 {
	if c.Completed == 0 {
		return 0
	}
	var d time.Duration
	for k, v := range c.CPU {
		if part == "" || k == part {
			d += v
		}
	}
	return float64(d.Microseconds()) / float64(c.Completed)
}

// partsOrder is the order the statements are reported in.
var partsOrder = []string{"enqueue", "insert", "sweep", "claim", "start", "load", "record", "order", "connection", "complete"}

// partsSide is one variant's connections and what it measured.
type partsSide struct {
	name   string
	orders []churnOrder
	conns  []*pgx.Conn
	pids   []int
	stores []*outbox.Store
	cmds   []*purchaseorder.Command
	params outbox.ClaimParams
	next   int // the connection of the next statement
	sent   int // commands enqueued
	cost   partsCost
}

func measureParts(ctx context.Context, log *slog.Logger, env *benchEnv) (partsResult, error) {
	res := partsResult{Rows: partsOutboxRows, Conns: partsConns, Commands: partsCycles * claimLimit, AnalyzeEvery: partsAnalyzeEvery}
	orders := 2*(partsWarmup+partsCycles)*claimLimit + 1000
	dbs, err := prepareChurnDatabases(ctx, env, partsOutboxRows, orders, churnLevers{RecordSQL: true})
	if err != nil {
		return res, err
	}
	var sides []*partsSide
	defer func() {
		for _, s := range sides {
			for _, c := range s.conns {
				c.Close(context.WithoutCancel(ctx))
			}
		}
	}()
	for _, name := range partsVariants {
		s, err := openPartsSide(ctx, dbs[name], name)
		if s != nil {
			sides = append(sides, s)
		}
		if err != nil {
			return res, fmt.Errorf("%s: %w", name, err)
		}
	}
	for _, analyze := range []bool{false, true} {
		for _, s := range sides {
			s.cost = partsCost{CPU: map[string]time.Duration{}}
		}
		for cycle := range partsWarmup + partsCycles {
			if cycle == partsWarmup {
				for _, s := range sides {
					s.cost = partsCost{CPU: map[string]time.Duration{}}
				}
			}
			for _, s := range sides {
				if err := s.cycle(ctx, cycle); err != nil {
					return res, fmt.Errorf("%s: %w", s.name, err)
				}
			}
			if analyze && ((cycle+1)*claimLimit)%partsAnalyzeEvery == 0 {
				for _, s := range sides {
					if _, err := s.conns[0].Exec(ctx, "analyze external_integration_outbox, integration_outbox_starts, external_integration_attempts"); err != nil {
						return res, fmt.Errorf("%s: analyze: %w", s.name, err)
					}
				}
			}
		}
		pass := map[string]partsCost{}
		for _, s := range sides {
			pass[s.name] = s.cost
			log.Info("churn statements alone", "variant", s.name, "analyze", analyze, "completed", s.cost.Completed,
				"cpuPerCommand", time.Duration(s.cost.per("")*1000))
		}
		if analyze {
			res.Analyzed = pass
		} else {
			res.Kept = pass
		}
	}
	return res, nil
}

// openPartsSide opens partsConns connections to the database at url, each
// with its own store and command, as a container holds them.
func openPartsSide(ctx context.Context, url, name string) (*partsSide, error) {
	s := &partsSide{name: name, params: outbox.ClaimParams{Limit: claimLimit, MaxAttempts: 10, Lease: 900 * time.Second,
		MaxInFlight: 5000, ConnectionMaxInFlight: 10, After: "00000000-0000-0000-0000-000000000000"}}
	for range partsConns {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			return s, err
		}
		s.conns = append(s.conns, c)
		var pid int
		if err := c.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
			return s, err
		}
		st := outbox.NewStore(c).WithCircuit(outbox.Circuit{FailureThreshold: 5, Cooldown: time.Minute})
		if name == churnRecordSQL {
			st = st.WithRecordSQLOnly()
		}
		s.pids, s.stores, s.cmds = append(s.pids, pid), append(s.stores, st), append(s.cmds, purchaseorder.NewCommand(c))
	}
	var err error
	s.orders, err = churnOrders(ctx, s.conns[0])
	return s, err
}

// run runs f on the side's next connection (i) and charges part its
// backend's CPU.
func (s *partsSide) run(part string, f func(i int) error) error {
	i := s.next % len(s.conns)
	s.next++
	before := procRunTime(s.pids[i])
	if err := f(i); err != nil {
		return fmt.Errorf("%s: %w", part, err)
	}
	s.cost.CPU[part] += procRunTime(s.pids[i]) - before
	return nil
}

// cycle is claimLimit commands: each written by the host, then claimed and
// delivered as the churn does (ours: the sweep every churnSweepEvery
// cycles, the claim, then per group of churnGroup a start, a load and a
// record; legacy: its claim, then per job its two selects and its update).
func (s *partsSide) cycle(ctx context.Context, cycle int) error {
	legacy := s.name == churnLegacy
	for range claimLimit {
		o := s.orders[s.sent%len(s.orders)]
		key := fmt.Sprintf("parts-%d", s.sent)
		s.sent++
		sql, part := churnEnqueueSQL, "enqueue"
		if legacy {
			sql, part = legacyInsertSQL, "insert"
		}
		if err := s.run(part, func(i int) error {
			_, err := s.conns[i].Exec(ctx, sql, pgx.QueryExecModeExec, o.org, o.conn, o.id, churnPayload, key)
			return err
		}); err != nil {
			return err
		}
	}
	if legacy {
		var jobs []legacyJob
		if err := s.run("claim", func(i int) (err error) { jobs, err = legacyClaim(ctx, s.conns[i]); return }); err != nil {
			return err
		}
		for _, j := range jobs {
			for _, q := range []struct{ part, sql, arg string }{{"order", legacyOrderSQL, j.order}, {"connection", legacyConnectionSQL, j.conn}} {
				if err := s.run(q.part, func(i int) error {
					rows, err := s.conns[i].Query(ctx, q.sql, pgx.QueryExecModeExec, q.arg, j.org)
					if err != nil {
						return err
					}
					for rows.Next() {
					}
					rows.Close()
					return rows.Err()
				}); err != nil {
					return err
				}
			}
			if err := s.run("complete", func(i int) error {
				_, err := s.conns[i].Exec(ctx, legacyCompleteSQL, pgx.QueryExecModeExec, j.id, "ref-"+j.id)
				return err
			}); err != nil {
				return err
			}
			s.cost.Completed++
		}
		return nil
	}
	if cycle%churnSweepEvery == 0 {
		if err := s.run("sweep", func(i int) error { _, err := s.stores[i].DeadLetterExpired(ctx, s.params); return err }); err != nil {
			return err
		}
	}
	var b outbox.Batch
	if err := s.run("claim", func(i int) (err error) { b, err = s.stores[i].ClaimBatch(ctx, s.params); return }); err != nil {
		return err
	}
	s.params.After = b.NextAfter(s.params.After)
	for lo := 0; lo < len(b.Claims); lo += churnGroup {
		claims := b.Claims[lo:min(lo+churnGroup, len(b.Claims))]
		reqs := make([]outbox.StartRequest, len(claims))
		for k, c := range claims {
			reqs[k] = outbox.StartRequest{OutboxID: c.ID, OrganizationID: c.OrganizationID, ConnectionID: c.ConnectionID,
				ClaimToken: c.ClaimToken, LeaseUntil: time.Now().Add(time.Minute)}
		}
		var jobs []outbox.Job
		if err := s.run("start", func(i int) (err error) { jobs, err = s.stores[i].Start(ctx, reqs); return }); err != nil {
			return err
		}
		if err := s.run("load", func(i int) error { _, err := s.cmds[i].Load(ctx, jobs); return err }); err != nil {
			return err
		}
		outs := churnOutcomes(jobs, time.Now(), time.Now())
		var r outbox.Recorded
		if err := s.run("record", func(i int) (err error) { r, err = s.stores[i].Record(ctx, outs); return }); err != nil {
			return err
		}
		s.cost.Completed += len(r.IDs)
	}
	return nil
}

// partsRows are the table's rows: each pass, ours against the legacy
// worker, the lever beside.
func partsRows(p *partsResult) []tableRow {
	if p == nil {
		return nil
	}
	var t []tableRow
	for _, pass := range []struct {
		what  string
		costs map[string]partsCost
	}{
		{"the plans kept", p.Kept},
		{fmt.Sprintf("an ANALYZE every %s commands (each connection plans again)", rows(p.AnalyzeEvery)), p.Analyzed},
	} {
		ours, legacy, lever := pass.costs[churnOurs], pass.costs[churnLegacy], pass.costs[churnRecordSQL]
		if legacy.per("") == 0 || ours.per("") == 0 {
			continue
		}
		t = append(t, tableRow{"10", fmt.Sprintf("The churn's statements alone, from %s rows (%s commands, one statement at a time over %d connections), %s: PostgreSQL backend CPU per command",
			rows(p.Rows), rows(p.Commands), p.Conns, pass.what),
			fmt.Sprintf("%.0f µs (%s)", ours.per(""), partsBreakdown(ours)),
			fmt.Sprintf("legacy: %.0f µs (%s); ours with every record through record.sql: %.0f µs (record %.0f µs)",
				legacy.per(""), partsBreakdown(legacy), lever.per(""), lever.per("record")),
			fmt.Sprintf("ours/legacy %s; record_completed.sql against record.sql %s", x(ours.per("")/legacy.per("")), x(ours.per("record")/lever.per("record"))),
			"", "reported"})
	}
	return t
}

// partsBreakdown is c's statements, µs per command each.
func partsBreakdown(c partsCost) string {
	var out []string
	for _, k := range partsOrder {
		if _, ok := c.CPU[k]; ok {
			out = append(out, fmt.Sprintf("%s %.0f", k, c.per(k)))
		}
	}
	for k := range c.CPU {
		if !slices.Contains(partsOrder, k) {
			out = append(out, fmt.Sprintf("%s %.0f", k, c.per(k)))
		}
	}
	return strings.Join(out, ", ")
}

// partsMarkdown is how the measurement was taken.
func partsMarkdown(p *partsResult) string {
	if p == nil {
		return ""
	}
	return fmt.Sprintf("\n## The churn's statements alone\n\nThe churn's work on a churn database of %s rows (ours, the legacy worker's with its indexes, and ours again with every record through `record.sql`, `outbox.Store.WithRecordSQLOnly`), with nothing else running: per cycle %d commands written by the host (ours `integration_outbox_enqueue`, legacy its plain `INSERT`), then claimed and delivered as the churn's workers do, without the fake provider call (ours: the sweep every %d cycles, `ClaimBatch`, per group of %d `Start`, `purchaseorder.Command.Load` and `Record` of completed outcomes; legacy: its claim, then per job its two selects and its update). Each statement runs on the next of %d connections (each with its own store and command, as containers hold them), and is charged the CPU its backend ran meanwhile (`/proc/<pid>/schedstat`): no other process, no autovacuum, no concurrency. %d cycles warm up, %d are measured (%s commands per variant). The first pass keeps every plan; the second runs `ANALYZE` of the outbox, the starts and the attempts every %s commands, after which each connection plans again each statement that reads them, as after an autovacuum round (the churn's autovacuum analyzes the outbox about once a minute at 40k rows, every 12,000 commands).\n",
		rows(p.Rows), claimLimit, churnSweepEvery, churnGroup, p.Conns, partsWarmup, partsCycles, rows(p.Commands), rows(p.AnalyzeEvery))
}
