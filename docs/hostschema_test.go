package docs_test

import (
	"os"
	"strings"
	"testing"

	"integration-outbox/internal/hostschema"
)

// docs/deploy.md's table of the host's columns is the declaration
// (internal/hostschema), row for row: the two cannot drift.
func TestDeployDocListsTheDeclaredHostColumns(t *testing.T) {
	doc, err := os.ReadFile("deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## What the worker needs of the host's tables")
	if !ok {
		t.Fatal("deploy.md has no section \"What the worker needs of the host's tables\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var got []string
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "| `") {
			got = append(got, line)
		}
	}
	var want []string
	for _, tb := range hostschema.Tables {
		for _, c := range tb.Columns {
			use := "reads"
			if c.Writes {
				use = "writes"
			}
			want = append(want, "| `"+tb.Name+"` | `"+c.Name+"` | "+hostschema.KindName(c.Kind)+" | "+string(c.Owner)+" | "+use+" |")
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("deploy.md's table differs from hostschema.Tables; it should read:\n%s", strings.Join(want, "\n"))
	}
}
