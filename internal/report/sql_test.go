package report

import (
	"strings"
	"testing"

	"integration-outbox/internal/sqlfile"
)

// The statements whose plans TestOperatorViewsUseOurIndexes checks, as pgx
// sends them: their named arguments numbered in the order they first appear.
var (
	listSQL          = sqlfile.Positional(listQuery)
	conflictsSQL     = sqlfile.Positional(conflictsQuery)
	overdueQueuedSQL = sqlfile.Positional(overdueQueuedQuery)
	failedSQL        = sqlfile.Positional(failedQuery)
	waitingBehindSQL = sqlfile.Positional(waitingBehindQuery)
)

// Every listing view prints its rows in the row columns of sql/list.sql (a
// Row is scanned by position): each of their statements repeats them as
// they stand there.
func TestEveryListingViewHasTheRowColumnsOfTheList(t *testing.T) {
	t.Parallel()
	columns, _, ok := strings.Cut(strings.TrimPrefix(listQuery, "select "), "\nfrom")
	if !ok {
		t.Fatalf("sql/list.sql is not select ... from:\n%s", listQuery)
	}
	for name, sql := range map[string]string{"expired_leases": expiredLeasesQuery,
		"accepted_waiting": acceptedWaitingQuery, "old_worker": oldWorkerQuery, "overdue_queued": overdueQueuedQuery,
		"failed": failedQuery, "entities_waiting": entitiesWaitingQuery} {
		if !strings.Contains(sql, columns) {
			t.Errorf("sql/%s.sql does not have the row columns of sql/list.sql:\n%s", name, columns)
		}
	}
}
