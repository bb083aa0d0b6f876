// Package sqlfile reads the statements a package keeps in embedded .sql
// files, one statement per file, its documentation in the file's leading
// "--" lines.
package sqlfile

import (
	"io/fs"
	"strings"
)

// Statement returns the statement in fsys's sql/<name>.sql without its
// leading comment. A missing file is a mistake of the build, caught by any
// test of the package that embeds it: it panics, naming owner.
func Statement(fsys fs.FS, owner, name string) string {
	b, err := fs.ReadFile(fsys, "sql/"+name+".sql")
	if err != nil {
		panic(owner + ": reading its SQL: " + err.Error())
	}
	text := string(b)
	for strings.HasPrefix(text, "--") {
		_, text, _ = strings.Cut(text, "\n")
	}
	return strings.TrimSpace(text)
}
