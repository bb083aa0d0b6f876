package main

import (
	"context"
	_ "embed"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

// legacyClaimSQL is the claim of the legacy worker, the one this project
// replaces (external-outbound.worker.ts), kept verbatim as a fixture.
//
//go:embed testdata/legacy_claim.sql
var legacyClaimFile string

var legacyClaimSQL = strings.TrimSuffix(legacyClaimFile, "\n")

const (
	claimLimit  = 50 // CLAIM_BATCH_SIZE, and the legacy worker's limit
	claimWarmup = 3  // unmeasured claims per variant before the measured ones
)

// Claim variants: our claim on our schema, and the legacy worker's SQL on the same
// rows with only primary keys or with a plain (status, created_at) index.
const (
	variantOurs        = "ours"
	variantLegacyPK    = "legacy, primary keys only"
	variantLegacyPlain = "legacy, (status, created_at) index"
)

var claimVariants = []string{variantOurs, variantLegacyPK, variantLegacyPlain}

// claimSize is the result at one outbox size.
type claimSize struct {
	Rows    int
	Due     int
	LoadFor time.Duration
	// Samples are the measured claim durations per variant.
	Samples map[string][]time.Duration
}

func (c claimSize) median(variant string) time.Duration { return median(c.Samples[variant]) }

// claimDatabases are the three databases of one size, same rows.
type claimDatabases map[string]string // variant → URL

// prepareClaimDatabases loads rows outbox rows into a migrated database
// (ours) and clones it twice for the legacy worker: one with every index of the outbox
// but its primary key dropped, one with a plain (status, created_at) index
// instead.
func prepareClaimDatabases(ctx context.Context, env *benchEnv, rows int) (claimDatabases, error) {
	ours, err := env.pg.MigratedDatabase(ctx)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, ours)
	if err != nil {
		return nil, err
	}
	err = loadOutbox(ctx, conn, rows)
	conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return nil, err
	}
	dbs := claimDatabases{variantOurs: ours}
	for _, v := range []string{variantLegacyPK, variantLegacyPlain} {
		name := fmt.Sprintf("claim_%d_%s", rows, map[string]string{variantLegacyPK: "legacy_pk", variantLegacyPlain: "legacy_plain"}[v])
		// FILE_COPY: a plain file copy is much quicker than WAL-logging
		// every block of a large database (PostgreSQL 15's default).
		err := cloneDatabase(ctx, env, databaseName(ours), name)
		if err != nil {
			return nil, fmt.Errorf("cloning the outbox for %q: %w", v, err)
		}
		url := testenv.ReplaceDatabase(env.pg.URL, name)
		if err := legacyIndexes(ctx, url, v == variantLegacyPlain); err != nil {
			return nil, err
		}
		dbs[v] = url
	}
	return dbs, nil
}

// loadOutbox bulk-loads rows outbox rows over 10 connections: every 100th row
// due (three in four queued, one in four failed with a past next_attempt_at),
// the rest completed, created one second apart with the due rows spread
// evenly among them. Autovacuum is off on the outbox afterwards so that every
// measured claim meets the same table.
func loadOutbox(ctx context.Context, conn *pgx.Conn, rows int) error {
	stmts := []struct {
		sql  string
		args []any
	}{
		{`insert into integration_connections (organization_id, provider, credential_reference, config_json)
		  select gen_random_uuid(), 'sandbox', 'integrations/bench/' || g, '{}' from generate_series(1, 10) g`, nil},
		{`with c as (
		      select id, organization_id, (row_number() over (order by id) - 1)::int as n from integration_connections)
		  insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
		      local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count, next_attempt_at,
		      last_error, provider_reference, provider_status, completed_at, created_at, updated_at)
		  select c.organization_id, c.id, 'sandbox', 'push_purchase_order', 'purchase_order', gen_random_uuid(),
		      '{"externalSupplierId": "SUP-1"}', 'idem-' || g,
		      case when g % 100 <> 0 then 'completed' when g % 400 = 0 then 'failed' else 'queued' end,
		      case when g % 100 <> 0 then 1 when g % 400 = 0 then 2 else 0 end,
		      case when g % 400 = 0 then now() - interval '1 minute' end,
		      case when g % 400 = 0 then 'provider answered 503' end,
		      case when g % 100 <> 0 then 'ref-' || g end,
		      case when g % 100 <> 0 then 'completed' end,
		      case when g % 100 <> 0 then t.ts + interval '2 seconds' end,
		      t.ts, t.ts
		  from generate_series(1, $1::int) g
		  cross join lateral (select now() - make_interval(secs => $1::int - g) as ts) t
		  join c on c.n = g % 10`, []any{rows}},
		{`vacuum (analyze) integration_connections`, nil},
		{`vacuum (analyze) external_integration_outbox`, nil},
		{`alter table external_integration_outbox set (autovacuum_enabled = false)`, nil},
	}
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s.sql, s.args...); err != nil {
			return fmt.Errorf("loading %d outbox rows: %w", rows, err)
		}
	}
	return nil
}

// legacyIndexes drops every outbox index but the primary key and, when plain,
// adds the plain (status, created_at) index.
func legacyIndexes(ctx context.Context, url string, plain bool) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `select indexrelid::regclass::text from pg_index
		where indrelid = 'external_integration_outbox'::regclass and not indisprimary`)
	if err != nil {
		return err
	}
	indexes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, ix := range indexes {
		if _, err := conn.Exec(ctx, "drop index "+ix); err != nil {
			return fmt.Errorf("dropping %s: %w", ix, err)
		}
	}
	if plain {
		if _, err := conn.Exec(ctx, `create index external_integration_outbox_status_created_at_idx
			on external_integration_outbox (status, created_at)`); err != nil {
			return err
		}
	}
	_, err = conn.Exec(ctx, `analyze external_integration_outbox`)
	return err
}

// claimOnce runs one claim of variant in a transaction that is rolled back,
// so every claim meets the same due rows, and returns its duration (the
// statement and reading its rows; not the begin and rollback).
//
// Ours goes through outbox.Store.Claim with pgx's defaults (a cached
// prepared statement, as the functions run it). The legacy worker's SQL runs as
// node-postgres sends a parameterised query: an unnamed statement, planned
// for its parameters every time.
func claimOnce(ctx context.Context, conn *pgx.Conn, variant string) (time.Duration, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var (
		n     int
		began = time.Now()
	)
	if variant == variantOurs {
		claims, err := outbox.NewStore(tx).WithCircuit(outbox.Circuit{FailureThreshold: 5, Cooldown: time.Minute}).Claim(ctx, outbox.ClaimParams{
			Limit: claimLimit, MaxAttempts: 10, Lease: 900 * time.Second})
		if err != nil {
			return 0, err
		}
		n = len(claims)
	} else {
		rows, err := tx.Query(ctx, legacyClaimSQL, pgx.QueryExecModeExec, claimLimit)
		if err != nil {
			return 0, fmt.Errorf("legacy claim: %w", err)
		}
		for rows.Next() {
			if _, err := rows.Values(); err != nil {
				rows.Close()
				return 0, err
			}
			n++
		}
		if err := rows.Err(); err != nil {
			return 0, fmt.Errorf("legacy claim: %w", err)
		}
	}
	took := time.Since(began)
	if n != claimLimit {
		return 0, fmt.Errorf("%s claimed %d rows, want %d: the measurement would not compare like with like", variant, n, claimLimit)
	}
	return took, nil
}

// measureClaims measures every variant at every size. Claims alternate
// between the variants, round after round, so drift on a noisy machine hits
// them alike. Each size's databases are dropped before the next is loaded.
func measureClaims(ctx context.Context, log *slog.Logger, env *benchEnv, sizes []int, runs int) ([]claimSize, error) {
	var out []claimSize
	for _, rows := range sizes {
		t := time.Now()
		dbs, err := prepareClaimDatabases(ctx, env, rows)
		if err != nil {
			return out, err
		}
		res := claimSize{Rows: rows, Due: rows / 100, LoadFor: time.Since(t), Samples: map[string][]time.Duration{}}
		log.Info("outbox loaded", "rows", rows, "took", res.LoadFor.Round(time.Millisecond))
		err = func() error {
			conns := map[string]*pgx.Conn{}
			defer func() {
				for _, c := range conns {
					c.Close(context.WithoutCancel(ctx))
				}
			}()
			for _, v := range claimVariants {
				c, err := pgx.Connect(ctx, dbs[v])
				if err != nil {
					return err
				}
				conns[v] = c
			}
			for round := range claimWarmup + runs {
				for _, v := range claimVariants {
					d, err := claimOnce(ctx, conns[v], v)
					if err != nil {
						return fmt.Errorf("%d rows: %w", rows, err)
					}
					if round >= claimWarmup {
						res.Samples[v] = append(res.Samples[v], d)
					}
				}
			}
			return nil
		}()
		for _, url := range dbs {
			if derr := env.dropDatabase(ctx, url); derr != nil && err == nil {
				err = derr
			}
		}
		if err != nil {
			return out, err
		}
		log.Info("claims measured", "rows", rows, "ours", res.median(variantOurs),
			"legacyPK", res.median(variantLegacyPK), "legacyPlain", res.median(variantLegacyPlain))
		out = append(out, res)
	}
	return out, nil
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
