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

// commandTypesRows is the size of the fair load the command-types
// measurement claims from.
const commandTypesRows = 40_000

// commandTypesClaim is the fair, capped claim on a load of one command type
// and on the same load where every other due row is a push_supplier.
type commandTypesClaim struct {
	Rows int
	// One and Two are the measured claim durations with one command type
	// due and with two.
	One, Two []time.Duration
	// Server is the claim statement's server side over the measured
	// claims, one type then two.
	Server [2]claimServer
}

func (c commandTypesClaim) ratio() float64 {
	return float64(median(c.Two)) / float64(median(c.One))
}

// makeHalfSuppliers turns every other due row (queued or failed) of the
// fair load into a push_supplier of a supplier, as a host that syncs its
// suppliers beside its orders would have them waiting.
func makeHalfSuppliers(ctx context.Context, conn *pgx.Conn) error {
	tag, err := conn.Exec(ctx, `
		update external_integration_outbox o
		set command_type = 'push_supplier', local_entity_type = 'supplier', payload_json = '{"name": "Supplier"}'
		from (select id, row_number() over (order by created_at) as n from external_integration_outbox
		      where status in ('queued', 'failed')) d
		where o.id = d.id and d.n % 2 = 0`)
	if err == nil && tag.RowsAffected() == 0 {
		err = errors.New("no due rows to turn into push_supplier")
	}
	return err
}

// measureCommandTypes measures the fair, capped claim (as measureFairClaims)
// on two databases of the same fair load of commandTypesRows rows: one
// whose due rows are all push_purchase_order, one where every other due
// row is a push_supplier. The databases take turns claim by claim.
func measureCommandTypes(ctx context.Context, log *slog.Logger, env *benchEnv, runs int) (res commandTypesClaim, err error) {
	res = commandTypesClaim{Rows: commandTypesRows}
	samples, server, err := alternateFairClaims(ctx, log, env, commandTypesRows, runs,
		func(context.Context, *pgx.Conn) error { return nil }, makeHalfSuppliers)
	if err != nil {
		return res, err
	}
	res.One, res.Two, res.Server = samples[0], samples[1], [2]claimServer{server[0], server[1]}
	log.Info("command types measured", "one", median(res.One), "two", median(res.Two),
		"ratio", fmt.Sprintf("%.2f", res.ratio()),
		"serverOneMs", res.Server[0].ExecMs, "serverTwoMs", res.Server[1].ExecMs,
		"hitsOne", res.Server[0].Hits, "hitsTwo", res.Server[1].Hits)
	return res, nil
}

// commandTypesMarkdown reports the claim with one and two command types due.
func commandTypesMarkdown(c *commandTypesClaim) string {
	if c == nil {
		return ""
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("\n## The claim with a second command type waiting\n\n")
	p("The fair, capped claim (as above, on %s rows) on a load whose due rows are all `push_purchase_order`, beside the same load where every other due row is a `push_supplier` (its `local_entity_type` `supplier`). The claim routes whatever `command_type` a row has; this measures what the second type costs it. The two databases take turns claim by claim: %d unmeasured claims each, then the median of %d, each rolled back; the server's figures are the claim statement's `pg_stat_statements` entry over the measured claims.\n\n",
		rows(c.Rows), claimWarmup, len(c.Two))
	p("| Measure | One command type | Two | Ratio |\n|---|---|---|---|\n")
	p("| Median claim | %s | %s | %s |\n", ms(median(c.One)), ms(median(c.Two)), x(c.ratio()))
	o, t := c.Server[0], c.Server[1]
	p("| Server execution per claim (mean) | %.2f ms | %.2f ms | %s |\n", o.ExecMs, t.ExecMs, x(t.ExecMs/o.ExecMs))
	p("| Shared buffers per claim (mean) | %.0f | %.0f | %s |\n", o.Hits, t.Hits, x(t.Hits/o.Hits))
	return b.String()
}
