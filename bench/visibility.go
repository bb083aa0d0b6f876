package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// visibilityShares are the all-visible shares of the outbox's pages at
// which the fair claim is measured, settled (all pages all-visible) first.
var visibilityShares = []int{100, 30, 10}

// visibilityClaim is the fair claim at one all-visible share.
type visibilityClaim struct {
	Rows int
	// Share is the percentage of the outbox's pages marked all-visible
	// (pg_class.relallvisible / relpages, as the planner reads it).
	Share   int
	Samples []time.Duration
}

func (v visibilityClaim) median() time.Duration { return median(v.Samples) }

// measureVisibility measures the fair, capped claim on one load of rows at
// each all-visible share of visibilityShares: after a bulk load, a restore,
// VACUUM FULL or on a small hot table few pages are all-visible, and a
// plan chosen for a settled table may not be the one chosen then. The
// table is settled first; each lower share is reached by updating one row
// (updated_at, no index on it) on every page that should lose its
// all-visible mark, then ANALYZE so that the planner sees the share. Each
// share's claims start with a fresh connection, so the claim is planned
// again for it.
func measureVisibility(ctx context.Context, log *slog.Logger, env *benchEnv, rows, runs int) (_ []visibilityClaim, err error) {
	url, err := env.pg.MigratedDatabase(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, env.dropDatabase(context.WithoutCancel(ctx), url)) }()
	setup, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer setup.Close(context.WithoutCancel(ctx))
	if err := loadFairOutbox(ctx, setup, rows, false); err != nil {
		return nil, err
	}
	if err := settle(ctx, log, setup, fairClaimTables); err != nil {
		return nil, err
	}
	var out []visibilityClaim
	for _, share := range visibilityShares {
		got, err := lowerAllVisible(ctx, setup, share)
		if err != nil {
			return nil, err
		}
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return nil, err
		}
		v := visibilityClaim{Rows: rows, Share: got}
		after := "00000000-0000-0000-0000-000000000000"
		for round := range fairClaimWarmup + runs {
			var d time.Duration
			if d, after, err = fairClaimOnce(ctx, conn, after); err != nil {
				conn.Close(context.WithoutCancel(ctx))
				return nil, fmt.Errorf("all-visible %d%%: %w", got, err)
			}
			if round >= fairClaimWarmup {
				v.Samples = append(v.Samples, d)
			}
		}
		conn.Close(context.WithoutCancel(ctx))
		log.Info("claims measured", "allVisiblePercent", got, "median", v.median())
		out = append(out, v)
	}
	return out, nil
}

// lowerAllVisible brings the share of the outbox's all-visible pages down
// to at most share percent (100: leaves it as settle left it) and returns
// the share the planner now sees.
func lowerAllVisible(ctx context.Context, conn *pgx.Conn, share int) (int, error) {
	if share < 100 {
		// One row on each page whose number falls outside the share keeps
		// the page from being all-visible once updated.
		if _, err := conn.Exec(ctx, `
			update external_integration_outbox set updated_at = updated_at
			where ctid = any (array(
				select format('(%s,1)', p)::tid
				from generate_series(0, pg_relation_size('external_integration_outbox') / current_setting('block_size')::int - 1) p
				where p % 100 >= $1))`, share); err != nil {
			return 0, fmt.Errorf("clearing all-visible marks down to %d%%: %w", share, err)
		}
		if _, err := conn.Exec(ctx, "analyze external_integration_outbox"); err != nil {
			return 0, err
		}
	}
	var got float64
	err := conn.QueryRow(ctx, `select 100.0 * relallvisible / greatest(relpages, 1)
		from pg_class where oid = 'external_integration_outbox'::regclass`).Scan(&got)
	return int(got + 0.5), err
}

// visibilityMarkdown reports the claim at each all-visible share.
func visibilityMarkdown(vs []visibilityClaim) string {
	if len(vs) == 0 {
		return ""
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("\n## The fair claim when few pages are all-visible\n\n")
	p("The fair, capped claim (as above) on %s rows, settled, then with fewer of the outbox's pages all-visible (one row updated on each page that loses its mark, then `ANALYZE`): what a bulk load, a restore, `VACUUM FULL` or a small hot table leaves. Each share is claimed on a fresh connection, so the claim is planned again; %d unmeasured claims, then the median of %d, each rolled back.\n\n",
		rows(vs[0].Rows), fairClaimWarmup, len(vs[0].Samples))
	p("| All-visible pages | Median claim | Ratio to the settled claim | Target |\n|---|---|---|---|\n")
	for _, v := range vs {
		p("| %d%% | %s | %s | ≤ 1.50× |\n", v.Share, ms(v.median()), x(float64(v.median())/float64(vs[0].median())))
	}
	return b.String()
}
