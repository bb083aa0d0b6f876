package rerun

import "testing"

// A rerun locks the rows a dry run reads: each locking read is the dry run's
// read for update.
func TestEachLockingReadIsTheDryRunsReadForUpdate(t *testing.T) {
	for lock, read := range map[string]string{"lock_by_ids": selectByIDsSQL, "lock_by_filter": selectByFilterSQL} {
		if got, want := statement(lock), read+"\nfor update"; got != want {
			t.Errorf("sql/%s.sql is not its dry run's read for update:\n%s\nwant:\n%s", lock, got, want)
		}
	}
}
