package pgtx

import "github.com/jackc/pgx/v5"

// sessionParams are the settings every connection of ours asks for in its
// startup message, so that they hold for every statement it runs, from the
// first, at no round trip; the host's own connections keep the database's
// settings.
//
// jit off: our statements are short index probes that run in milliseconds,
// but a generic plan of the claim can be costed above jit_above_cost, and
// PostgreSQL then compiles hundreds of functions at every execution, even of
// a cached plan (seconds, against milliseconds of work). claim_setup.sql also
// switches it off for the claim's transaction, for a connection that arrives
// without it (a pooler that drops startup parameters).
var sessionParams = map[string]string{"jit": "off"}

// Configure sets our session parameters on cfg (a pgx.ConnConfig, or a
// pgxpool.Config's ConnConfig). They replace the same parameters given in the
// connection string.
func Configure(cfg *pgx.ConnConfig) {
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	for name, value := range sessionParams {
		cfg.RuntimeParams[name] = value
	}
}
