package report

import (
	"embed"

	"integration-outbox/internal/sqlfile"
)

// Every read view of the operator's CLI lives in sql/, one file per
// statement, its documentation in the file's leading comment; they only
// read. In the listing views @max_attempts is MAX_ATTEMPTS (for the attempts
// left) and the organization is optional; the views of one row require its
// organization. Their arguments are named (pgx.NamedArgs).
//
//go:embed sql/*.sql
var sqlFiles embed.FS

// The statements, read once at package init. (The plan test's listSQL,
// failedSQL... are some of them as pgx sends them: sql_test.go.)
var (
	listQuery            = statement("list")
	showRowQuery         = statement("show_row")
	conflictsQuery       = statement("conflicts")
	attemptsQuery        = statement("attempts")
	historyQuery         = statement("history")
	expiredLeasesQuery   = statement("expired_leases")
	acceptedWaitingQuery = statement("accepted_waiting")
	oldWorkerQuery       = statement("old_worker")
	overdueQueuedQuery   = statement("overdue_queued")
	failedQuery          = statement("failed")
	circuitsQuery        = statement("circuits")
	waitingBehindQuery   = statement("waiting_behind")
	entitiesWaitingQuery = statement("entities_waiting")
)

// statement is sql/<name>.sql without its leading comment.
func statement(name string) string { return sqlfile.Statement(sqlFiles, "report", name) }

// Statements are every statement of the package, for the schema check
// (internal/schemacheck).
func Statements() []sqlfile.Named { return sqlfile.All(sqlFiles, "report") }
