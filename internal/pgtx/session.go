package pgtx

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// Configure makes cfg (a pgx.ConnConfig, or a pgxpool.Config's ConnConfig)
// safe behind a transaction pooler (PgBouncer in transaction mode, RDS
// Proxy), where each transaction may run on another server connection and
// nothing a session holds reaches the next one:
//
//   - statements are unnamed (pgx's QueryExecModeCacheDescribe: parsed with
//     each execution, their descriptions cached here), since a named
//     prepared statement is gone on the next server connection (PgBouncer:
//     "prepared statement … does not exist") or pins the session to one
//     (RDS Proxy). The statements that cost far more to plan than to run
//     keep their plans on the server instead (internal/sqlroutine).
//     default_query_exec_mode in the connection string overrides this
//     (cache_statement: named statements, for a direct connection only);
//   - no startup parameter of ours: PgBouncer refuses a connection whose
//     startup packet carries one it does not know (jit, which our
//     connections used to set, among them), and the routines switch JIT off
//     for their own run.
func Configure(cfg *pgx.ConnConfig) {
	if !strings.Contains(cfg.ConnString(), "default_query_exec_mode") {
		cfg.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
}

// NamedStatements reports whether cfg sends named prepared statements
// (default_query_exec_mode=cache_statement in its connection string): they
// fail behind a transaction pooler.
func NamedStatements(cfg *pgx.ConnConfig) bool {
	return cfg.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement
}
