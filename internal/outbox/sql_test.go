package outbox

import (
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"
)

// Every file under sql/ is read: each statement by a statement call of
// sql.go, each fragment by a marker of another file. Every statement, as
// sent, has all its markers replaced, is not empty and takes named arguments
// only.
func TestEverySQLFileIsUsedAndEveryMarkerReplaced(t *testing.T) {
	src, err := os.ReadFile("sql.go")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	var statements []string
	for _, m := range regexp.MustCompile(`(?:statement|routine)\("([a-z_]+)"`).FindAllStringSubmatch(string(src), -1) {
		statements = append(statements, m[1])
		used["sql/"+m[1]+".sql"] = true
	}
	var files []string
	err = fs.WalkDir(os.DirFS("."), "sql", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files = append(files, path)
		text, err := sqlFiles.ReadFile(path)
		if err != nil {
			return err // not embedded
		}
		for _, m := range fragmentMarker.FindAllStringSubmatch(string(text), -1) {
			used["sql/fragment/"+m[1]+".sql"] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		if !strings.HasSuffix(path, ".sql") || !used[path] {
			t.Errorf("%s is not a statement of sql.go nor a fragment any file names", path)
		}
	}
	positional := regexp.MustCompile(`\$[0-9]`)
	for _, name := range statements {
		sql := statement(name)
		if strings.Contains(sql, "/*fragment:") {
			t.Errorf("%s keeps a marker no fragment replaced:\n%s", name, sql)
		}
		if strings.TrimSpace(sql) == "" {
			t.Errorf("%s is empty", name)
		}
		if positional.MatchString(sql) {
			t.Errorf("%s takes a positional argument; the outbox's statements take named ones (pgx.NamedArgs):\n%s", name, sql)
		}
	}
	if len(statements) == 0 {
		t.Error("sql.go reads no statement")
	}
}
