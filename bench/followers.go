package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/outbox"
)

// followersBacklog is the number of queued commands of one entity behind its
// in-flight head in the followers measurement.
const followersBacklog = 10_000

// followersRows is the size of the fair load the followers measurement adds
// them to, unless -followers-rows sets it.
const followersRows = 40_000

// followersClaim is the fair, capped claim with and without a backlog of
// blocked commands of one entity.
type followersClaim struct {
	Rows, Followers int
	// Without and With are the measured claim durations without the
	// followers (the head alone in flight) and with them.
	Without, With []time.Duration
	// Server is the claim statement's server side over the measured
	// claims (pg_stat_statements), without the followers and with them.
	Server [2]claimServer
	// ListedWithout, ListedWith and ListedServer are the same for the
	// listed claim (a rerun's dispatchNow) of listedRows due rows of the
	// backlog's connection, newer than the backlog.
	ListedWithout, ListedWith []time.Duration
	ListedServer              [2]claimServer
	// Parking holds, without the followers and with them, the committed
	// claims that ran before the measured ones (parkFollowers): the
	// claims that parked the followers, under the claim's lock.
	Parking [2][]parkingClaim
}

// parkingClaim is one committed claim of parkFollowers: how long it took
// (ClaimBatch: its transaction, lock and statement) and how many followers
// it parked.
type parkingClaim struct {
	Took   time.Duration
	Parked int
}

// parkingTimes are the durations of the claims of cs that parked followers
// (with parked true) or of all of them.
func parkingTimes(cs []parkingClaim, parked bool) []time.Duration {
	var ds []time.Duration
	for _, c := range cs {
		if !parked || c.Parked > 0 {
			ds = append(ds, c.Took)
		}
	}
	return ds
}

// maxDuration is the longest of ds (0 for none).
func maxDuration(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// listedRows is how many rows the followers measurement's listed claim
// names.
const listedRows = 10

// claimServer is what the claim statement cost the server per call.
type claimServer struct {
	Calls int64
	// ExecMs is the mean execution time; Hits the mean shared buffers
	// hit (or read), which the machine's load does not change.
	ExecMs, Hits float64
}

func (f followersClaim) ratio() float64 {
	return float64(median(f.With)) / float64(median(f.Without))
}

func (f followersClaim) listedRatio() float64 {
	return float64(median(f.ListedWith)) / float64(median(f.ListedWithout))
}

// The pg_stat_statements texts of the two claims, as LIKE patterns: the
// call of the claim's routine (internal/sqlroutine; the top-level statement
// where make migrate installed it, as on the bench's databases), or the
// plain statement (where it did not).
const (
	scheduledClaimLike = "%integration_outbox_sql_outbox_claim_scheduled_%|%with recursive budget%"
	listedClaimLike    = "%integration_outbox_sql_outbox_claim_listed_%|%), listed as (%"
)

// readClaimServer reads the pg_stat_statements top-level entries of conn's
// database of the claim statement whose text is like (LIKE patterns
// separated by "|", any of them).
func readClaimServer(ctx context.Context, conn *pgx.Conn, like string) (claimServer, error) {
	var s claimServer
	err := conn.QueryRow(ctx, `
		select coalesce(sum(s.calls), 0)::bigint,
		    coalesce(sum(s.total_exec_time) / nullif(sum(s.calls), 0), 0),
		    coalesce(sum(s.shared_blks_hit + s.shared_blks_read)::float8 / nullif(sum(s.calls), 0), 0)
		from pg_stat_statements s join pg_database d on d.oid = s.dbid
		where d.datname = current_database() and s.toplevel
		  and s.query like any (string_to_array($1, '|'))`, like).Scan(&s.Calls, &s.ExecMs, &s.Hits)
	if err != nil {
		return s, fmt.Errorf("reading the claim's pg_stat_statements entry: %w", err)
	}
	return s, nil
}

// readClaims is readClaimServer of the scheduled claim, checked to have
// counted the runs measured claims since the statements were reset.
func readClaims(ctx context.Context, conn *pgx.Conn, runs int) (claimServer, error) {
	return readClaimsLike(ctx, conn, scheduledClaimLike, runs)
}

// readClaimsLike is readClaims of the claim statement whose text is like.
func readClaimsLike(ctx context.Context, conn *pgx.Conn, like string, runs int) (claimServer, error) {
	s, err := readClaimServer(ctx, conn, like)
	if err == nil && s.Calls != int64(runs) {
		err = fmt.Errorf("pg_stat_statements counted %d claims, want %d", s.Calls, runs)
	}
	return s, err
}

// loadFollowers adds, on the connection of the smallest organization whose
// circuit is closed (the first the claim's walk reads from the zeroed
// rotation), one command of a purchase order in flight (processing under a
// live lease) and followers queued commands of that purchase order behind
// it, all older than the fair load's due rows, so the walk reads the pair's
// blocked commands before its ordinary ones. It returns that organization.
func loadFollowers(ctx context.Context, conn *pgx.Conn, followers int) (string, error) {
	var org string
	err := conn.QueryRow(ctx, `
		with c as (
		    select c.id, c.organization_id from integration_connections c
		    where not exists (select 1 from integration_outbox_connection_health h where h.connection_id = c.id)
		    order by c.organization_id limit 1
		), po as (select gen_random_uuid() as id), ins as (
		    insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
		        local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count,
		        lease_expires_at, claim_token, created_at, updated_at)
		    select c.organization_id, c.id, 'sandbox', 'push_purchase_order', 'purchase_order', po.id,
		        '{"externalSupplierId": "SUP-1"}', 'idem-follower-' || g,
		        case when g = 0 then 'processing' else 'queued' end,
		        case when g = 0 then 1 else 0 end,
		        case when g = 0 then now() + interval '15 minutes' end,
		        case when g = 0 then gen_random_uuid() end,
		        t.ts, t.ts
		    from generate_series(0, $1::int) g
		    cross join c cross join po
		    cross join lateral (select now() - interval '2 days' + make_interval(secs => g * 0.1) as ts) t
		    returning organization_id
		)
		select organization_id::text from ins limit 1`, followers).Scan(&org)
	if err != nil {
		return "", fmt.Errorf("loading %d followers: %w", followers, err)
	}
	return org, nil
}

// parkClaims is how many committed claims parkFollowers runs: enough for
// the claim, which parks at most 200 followers each, fewer where rows it
// cannot take (failed ones waiting for their retry, due later) are older
// than the backlog (internal/outbox/sql/claim_scheduled.sql, park_read), to
// park the whole backlog.
const parkClaims = followersBacklog/100 + 2

// loadFollowersOnly is the first half of the followers measurement's
// prepare: the in-flight command and followers commands behind it
// (loadFollowers), before the database settles; parkFollowers, after it,
// parks them.
func loadFollowersOnly(followers int, org *string) func(context.Context, *pgx.Conn) error {
	return func(ctx context.Context, conn *pgx.Conn) (err error) {
		*org, err = loadFollowers(ctx, conn, followers)
		return err
	}
}

// parkFollowers runs parkClaims claims of org (loadFollowersOnly), each
// committed, as the dispatch runs would before the measured claims: the
// claims that meet the backlog park it. It runs once the database has
// settled (VACUUM, ANALYZE), as in production, where parking 10,000 rows
// of a large outbox is far from what makes autovacuum analyze the table
// (10% of its rows changed) or vacuum it (20%): the measured claims meet
// the statistics of before the parking (no row waiting) and the walk
// index's dead entries of the parked rows. Both databases of the measurement run the
// same claims; each claim's duration and how many followers it parked go to
// parking. With followers, every one must be parked after them.
func parkFollowers(ctx context.Context, conn *pgx.Conn, org string, followers int, listed *[]string,
	parking *[]parkingClaim) error {
	store := outbox.NewStore(conn).WithCircuit(outbox.Circuit{FailureThreshold: 5, Cooldown: time.Minute})
	countParked := func() (int, error) {
		var n int
		err := conn.QueryRow(ctx, `
			select count(*) from external_integration_outbox
			where organization_id = $1 and status = 'queued' and waiting_for_outbox_id is not null`, org).Scan(&n)
		if err != nil {
			return 0, fmt.Errorf("counting the parked followers: %w", err)
		}
		return n, nil
	}
	parked := 0
	for range parkClaims {
		began := time.Now()
		if _, err := store.ClaimBatch(ctx, outbox.ClaimParams{Limit: 1, MaxAttempts: 10, Lease: 900 * time.Second,
			MaxInFlight: 5000, OrganizationID: org}); err != nil {
			return fmt.Errorf("claiming the followers' organization: %w", err)
		}
		took := time.Since(began)
		n, err := countParked()
		if err != nil {
			return err
		}
		*parking = append(*parking, parkingClaim{Took: took, Parked: n - parked})
		parked = n
	}
	if parked != followers {
		return fmt.Errorf("%d claims parked %d of the %d followers", parkClaims, parked, followers)
	}
	// The listed claim's rows: due commands of the backlog's connection,
	// each of its own order, newer than the backlog.
	rows, err := conn.Query(ctx, `
		with c as (
		    select distinct integration_connection_id as id from external_integration_outbox
		    where organization_id = $1 and idempotency_key like 'idem-follower-%')
		insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
		    local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count)
		select $1, c.id, 'sandbox', 'push_purchase_order', 'purchase_order', gen_random_uuid(),
		    '{"externalSupplierId": "SUP-1"}', 'idem-listed-' || g, 'queued', 0
		from generate_series(1, $2::int) g cross join c
		returning id::text`, org, listedRows)
	if err != nil {
		return fmt.Errorf("adding the listed claim's rows: %w", err)
	}
	*listed, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err == nil && len(*listed) != listedRows {
		err = fmt.Errorf("added %d rows for the listed claim, want %d", len(*listed), listedRows)
	}
	return err
}

// listedClaimOnce times one listed claim of ids (a rerun's dispatchNow), no
// connection cap, rolled back, and checks it took them all.
func listedClaimOnce(ctx context.Context, conn *pgx.Conn, ids []string) (time.Duration, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	began := time.Now()
	store := outbox.NewStore(tx).WithCircuit(outbox.Circuit{FailureThreshold: 5, Cooldown: time.Minute})
	b, err := store.ClaimBatch(ctx, outbox.ClaimParams{Limit: len(ids), IDs: ids, MaxAttempts: 10,
		Lease: 900 * time.Second, MaxInFlight: 5000})
	took := time.Since(began)
	if err == nil && len(b.Claims) != len(ids) {
		err = fmt.Errorf("listed claim took %d of its %d rows", len(b.Claims), len(ids))
	}
	return took, err
}

// measureFollowers measures the fair, capped claim (as measureFairClaims) on
// two databases of the same fair load of rows rows: one with an
// in-flight command of one purchase order and followersBacklog queued
// commands of it behind, one with the in-flight command alone. Every claim
// starts its rotation at the zero organization, so each one walks the pair
// that holds the backlog. The databases take turns claim by claim.
func measureFollowers(ctx context.Context, log *slog.Logger, env *benchEnv, rows, runs int) (res followersClaim, err error) {
	res = followersClaim{Rows: rows, Followers: followersBacklog}
	listed := make([][]string, 2)
	orgs := make([]string, 2)
	claims := []benchClaim{fairBenchClaim, {like: listedClaimLike,
		once: func(ctx context.Context, conn *pgx.Conn, db int) (time.Duration, error) {
			return listedClaimOnce(ctx, conn, listed[db])
		}}}
	samples, server, err := alternateClaims(ctx, log, env, rows, runs, claims,
		[]func(context.Context, *pgx.Conn) error{loadFollowersOnly(0, &orgs[0]), loadFollowersOnly(followersBacklog, &orgs[1])},
		func(ctx context.Context, conn *pgx.Conn) error {
			return parkFollowers(ctx, conn, orgs[0], 0, &listed[0], &res.Parking[0])
		},
		func(ctx context.Context, conn *pgx.Conn) error {
			return parkFollowers(ctx, conn, orgs[1], followersBacklog, &listed[1], &res.Parking[1])
		})
	if err != nil {
		return res, err
	}
	res.Without, res.With, res.Server = samples[0][0], samples[0][1], [2]claimServer{server[0][0], server[0][1]}
	res.ListedWithout, res.ListedWith = samples[1][0], samples[1][1]
	res.ListedServer = [2]claimServer{server[1][0], server[1][1]}
	log.Info("followers measured", "without", median(res.Without), "with", median(res.With),
		"ratio", fmt.Sprintf("%.2f", res.ratio()),
		"serverWithoutMs", res.Server[0].ExecMs, "serverWithMs", res.Server[1].ExecMs,
		"hitsWithout", res.Server[0].Hits, "hitsWith", res.Server[1].Hits,
		"listedRatio", fmt.Sprintf("%.2f", res.listedRatio()),
		"listedServerWithoutMs", res.ListedServer[0].ExecMs, "listedServerWithMs", res.ListedServer[1].ExecMs,
		"parkingMedian", median(parkingTimes(res.Parking[1], true)), "parkingMax", maxDuration(parkingTimes(res.Parking[1], true)))
	return res, nil
}

// alternateFairClaims measures the fair, capped claim (as
// measureFairClaims) on one database per prepare: each a migrated database
// with the fair load of rows rows, then changed by its prepare and settled.
// The databases take turns claim by claim, each claim's rotation starting
// at the zero organization: claimWarmup unmeasured rounds, then runs
// measured ones. It returns each database's measured durations and its
// claim statement's server side over them, and drops the databases.
func alternateFairClaims(ctx context.Context, log *slog.Logger, env *benchEnv, rows, runs int,
	prepares ...func(context.Context, *pgx.Conn) error) ([][]time.Duration, []claimServer, error) {
	samples, server, err := alternateClaims(ctx, log, env, rows, runs, []benchClaim{fairBenchClaim}, nil, prepares...)
	if err != nil {
		return nil, nil, err
	}
	return samples[0], server[0], nil
}

// benchClaim is a claim alternateClaims times: its pg_stat_statements text
// (a LIKE pattern) and one claim of it on database db, rolled back.
type benchClaim struct {
	like string
	once func(ctx context.Context, conn *pgx.Conn, db int) (time.Duration, error)
}

// fairBenchClaim is the fair, capped claim, its rotation starting at the
// zero organization.
var fairBenchClaim = benchClaim{like: scheduledClaimLike,
	once: func(ctx context.Context, conn *pgx.Conn, _ int) (time.Duration, error) {
		d, _, err := fairClaimOnce(ctx, conn, "00000000-0000-0000-0000-000000000000")
		return d, err
	}}

// alternateClaims is alternateFairClaims for each claim of claims: in each
// round, each claim in turn on each database in turn. It returns, per claim,
// each database's measured durations and that claim statement's server
// side over them. A database with a loads entry (nil: none) runs it before
// it settles, and its prepare after.
func alternateClaims(ctx context.Context, log *slog.Logger, env *benchEnv, rows, runs int, claims []benchClaim,
	loads []func(context.Context, *pgx.Conn) error,
	prepares ...func(context.Context, *pgx.Conn) error) (_ [][][]time.Duration, _ [][]claimServer, err error) {
	var conns []*pgx.Conn
	defer func() {
		for _, c := range conns {
			url := c.Config().ConnString()
			c.Close(context.WithoutCancel(ctx))
			err = errors.Join(err, env.dropDatabase(context.WithoutCancel(ctx), url))
		}
	}()
	for i, prepare := range prepares {
		url, err := env.pg.MigratedDatabase(ctx)
		if err != nil {
			return nil, nil, err
		}
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return nil, nil, errors.Join(err, env.dropDatabase(ctx, url))
		}
		conns = append(conns, conn)
		if err := loadFairOutbox(ctx, conn, rows, false); err != nil {
			return nil, nil, err
		}
		if i < len(loads) {
			if err := loads[i](ctx, conn); err != nil {
				return nil, nil, fmt.Errorf("loading database %d: %w", i, err)
			}
			if err := settle(ctx, log, conn, fairClaimTables); err != nil {
				return nil, nil, fmt.Errorf("database %d: %w", i, err)
			}
			if err := prepare(ctx, conn); err != nil {
				return nil, nil, fmt.Errorf("preparing database %d: %w", i, err)
			}
			continue
		}
		if err := prepare(ctx, conn); err != nil {
			return nil, nil, fmt.Errorf("preparing database %d: %w", i, err)
		}
		if err := settle(ctx, log, conn, fairClaimTables); err != nil {
			return nil, nil, fmt.Errorf("database %d: %w", i, err)
		}
	}
	samples := make([][][]time.Duration, len(claims))
	for k := range claims {
		samples[k] = make([][]time.Duration, len(conns))
	}
	for round := range claimWarmup + runs {
		if round == claimWarmup {
			for _, conn := range conns {
				if err := resetStatements(ctx, conn); err != nil {
					return nil, nil, err
				}
			}
		}
		for k, c := range claims {
			for i, conn := range conns {
				d, err := c.once(ctx, conn, i)
				if err != nil {
					return nil, nil, fmt.Errorf("claim on database %d: %w", i, err)
				}
				if round >= claimWarmup {
					samples[k][i] = append(samples[k][i], d)
				}
			}
		}
	}
	server := make([][]claimServer, len(claims))
	for k, c := range claims {
		server[k] = make([]claimServer, len(conns))
		for i, conn := range conns {
			var err error
			if server[k][i], err = readClaimsLike(ctx, conn, c.like, runs); err != nil {
				return nil, nil, err
			}
		}
	}
	return samples, server, nil
}

// followersMarkdown reports the claim with and without the backlog.
func followersMarkdown(f *followersClaim) string {
	if f == nil {
		return ""
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("\n## The claim with a blocked backlog of one entity\n\n")
	p("The fair, capped claim (as above, on %s rows) with its rotation starting at the first organization whose circuit is closed, on whose connection one command of a purchase order is in flight (processing, leased); beside it the same load with %s queued commands of that purchase order behind it, older than every other due row, so the walk reads them before the pair's ordinary due rows. Each database settles (`VACUUM`, `ANALYZE`, autovacuum off) once loaded; then it runs %d claims of that organization, committed, as the dispatch runs would: those that meet the backlog park it (every follower must be parked after them). The measured claims thus meet what a large outbox has after the parking: the planner's statistics of before it (nothing waits; autovacuum analyzes a table once 10%% of its rows changed) and the parked rows' dead entries in the walk index. The two databases take turns claim by claim: %d unmeasured claims each, then the median of %d, each rolled back.\n\n",
		rows(f.Rows), rows(f.Followers), parkClaims, claimWarmup, len(f.With))
	p("The claim's time is taken as in the claim scaling (the statement and reading its rows); the server's figures are the claim statement's `pg_stat_statements` entry over the measured claims (reset after the unmeasured ones): its mean execution time, and its mean shared buffers hit or read, a count the machine's load does not change.\n\n")
	p("| Measure | Without the backlog | With it | Ratio | Target |\n|---|---|---|---|---|\n")
	p("| Median claim | %s | %s | %s | ≤ 1.50× |\n", ms(median(f.Without)), ms(median(f.With)), x(f.ratio()))
	w, k := f.Server[0], f.Server[1]
	p("| Server execution per claim (mean) | %.2f ms | %.2f ms | %s | ≤ 1.50× |\n", w.ExecMs, k.ExecMs, x(k.ExecMs/w.ExecMs))
	p("| Shared buffers per claim (mean) | %.0f | %.0f | %s | |\n", w.Hits, k.Hits, x(k.Hits/w.Hits))
	if parking := parkingTimes(f.Parking[1], true); len(parking) > 0 {
		all := parkingTimes(f.Parking[0], false)
		p("\nThe parking claims (committed, one row of that organization each, under the claim's lock): %d of the %d claims with the backlog parked it, at most %d followers a claim; their median %s, the longest %s; the same claims without the backlog: median %s, the longest %s.\n",
			len(parking), len(f.Parking[1]), slices.MaxFunc(f.Parking[1], func(a, b parkingClaim) int { return a.Parked - b.Parked }).Parked,
			ms(median(parking)), ms(maxDuration(parking)), ms(median(all)), ms(maxDuration(all)))
	}
	p("\nThe listed claim (a rerun's `dispatchNow`) of %d due commands of that connection, each of its own order and newer than the backlog, added after the parking claims; no connection cap; in the same rounds, rolled back:\n\n", listedRows)
	p("| Measure | Without the backlog | With it | Ratio | Target |\n|---|---|---|---|---|\n")
	p("| Median listed claim | %s | %s | %s | ≤ 1.50× |\n", ms(median(f.ListedWithout)), ms(median(f.ListedWith)), x(f.listedRatio()))
	w, k = f.ListedServer[0], f.ListedServer[1]
	p("| Server execution per listed claim (mean) | %.2f ms | %.2f ms | %s | ≤ 1.50× |\n", w.ExecMs, k.ExecMs, x(k.ExecMs/w.ExecMs))
	p("| Shared buffers per listed claim (mean) | %.0f | %.0f | %s | |\n", w.Hits, k.Hits, x(k.Hits/w.Hits))
	return b.String()
}
