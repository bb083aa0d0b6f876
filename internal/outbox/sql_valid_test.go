package outbox_test

import (
	"context"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Every file under sql/, statements and fragments alike, is valid SQL on
// its own, as it is in the repository (fragments' stand-ins and stand-in
// contexts included): PostgreSQL parses, analyses and plans it against the
// migrated schema. The check can fail: a fragment marker inside an
// expression without its stand-in, as the claim had them, is refused.
func TestEverySQLFileIsValidSQLOnItsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := pg.NewDB(t)
	conn, err := f.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	prepare := func(text string) error {
		sql, _, err := pgx.NamedArgs{}.RewriteQuery(ctx, conn.Conn(), text, nil)
		if err != nil {
			return err
		}
		_, err = conn.Conn().Prepare(ctx, "", sql)
		return err
	}
	var files int
	err = fs.WalkDir(os.DirFS("."), "sql", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".sql") {
			return err
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		if err := prepare(string(text)); err != nil {
			t.Errorf("%s is not valid SQL on its own: %v", path, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 10 {
		t.Fatalf("read %d files under sql/, want every statement and fragment", files)
	}
	if err := prepare(`select d.id from external_integration_outbox d
		where d.status = 'queued' and (not @ordered::bool or /*fragment:entity_head*/)`); err == nil {
		t.Error("a marker without its stand-in was accepted: the check cannot fail")
	}
}
