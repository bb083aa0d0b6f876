package sqlfile

import (
	"testing"
	"testing/fstest"
)

func TestStatementDropsItsLeadingComment(t *testing.T) {
	fsys := fstest.MapFS{"sql/claim.sql": {Data: []byte("-- Claims rows.\n-- Two lines.\n\nselect 1\n-- kept: not leading\n")}}
	if got, want := Statement(fsys, "test", "claim"), "select 1\n-- kept: not leading"; got != want {
		t.Errorf("Statement = %q, want %q", got, want)
	}
	defer func() {
		if r := recover(); r == nil {
			t.Error("a missing file did not panic")
		}
	}()
	Statement(fsys, "test", "missing")
}
