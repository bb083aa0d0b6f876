package rerun

import "integration-outbox/internal/sqlfile"

// SelectByFilterSQL is the statement whose plan rerun_test checks, as pgx
// sends it: its named arguments numbered in the order they first appear.
var SelectByFilterSQL = sqlfile.Positional(selectByFilterSQL)
