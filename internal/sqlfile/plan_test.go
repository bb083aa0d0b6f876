package sqlfile_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/sqlfile"
	"integration-outbox/internal/testenv"
)

var pg *testenv.Postgres

func TestMain(m *testing.M) { testenv.Main(m, testenv.WithPostgres(&pg)) }

// Every statement a package of internal/ keeps in its own sql/<name>.sql is
// complete on its own: it takes named arguments only, and PostgreSQL parses
// and plans it on a migrated database, as pgx sends it, with every argument
// null. (The outbox's files are put together from its sql/fragment/ files
// when read; its own tests plan the statements it sends.)
func TestEveryStatementFilePlansOnItsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	files, err := filepath.Glob("../*/sql/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	f := pg.NewDB(t)
	positional := regexp.MustCompile(`\$[0-9]`)
	planned := 0
	for _, path := range files {
		dir := filepath.Dir(filepath.Dir(path))
		pkg, name := filepath.Base(dir), strings.TrimSuffix(filepath.Base(path), ".sql")
		if pkg == "outbox" {
			continue
		}
		planned++
		t.Run(pkg+"/"+name, func(t *testing.T) {
			sql := sqlfile.Statement(os.DirFS(dir), pkg, name)
			if positional.MatchString(sql) {
				t.Errorf("%s takes a positional argument; it should take named ones (pgx.NamedArgs)", path)
			}
			// As pgx sends it: each @name a $n, and here each argument null.
			sql, args, err := pgx.NamedArgs{}.RewriteQuery(ctx, nil, sql, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Pool.Exec(ctx, "explain "+sql, args...); err != nil {
				t.Errorf("%s does not plan on its own: %v\n%s", path, err, sql)
			}
		})
	}
	if planned == 0 {
		t.Fatal("found no statement file to plan")
	}
}
