package lambdatest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// templateFunction is an AWS::Serverless::Function of template.yaml.
type templateFunction struct {
	LogicalID string
	CodeUri   string
}

// templateFunctions reads the functions of template.yaml, in template order.
func templateFunctions(t *testing.T) []templateFunction {
	t.Helper()
	tp := loadTemplate(t)
	var out []templateFunction
	for _, id := range tp.resourcesOfType("AWS::Serverless::Function") {
		var codeURI string
		if n := tp.property(id, "CodeUri"); n != nil {
			codeURI = n.Value
		}
		out = append(out, templateFunction{LogicalID: id, CodeUri: strings.TrimSuffix(codeURI, "/")})
	}
	if len(out) == 0 {
		t.Fatal("template.yaml: found no AWS::Serverless::Function under Resources")
	}
	return out
}

// logicalIDs maps a function folder to its logical id through CodeUri.
func logicalIDs(t *testing.T) map[string]string {
	t.Helper()
	ids := map[string]string{}
	for _, fn := range templateFunctions(t) {
		folder, ok := strings.CutPrefix(fn.CodeUri, "functions/")
		if !ok || strings.Contains(folder, "/") {
			t.Fatalf("template.yaml: %s has CodeUri %q, want functions/<folder>", fn.LogicalID, fn.CodeUri)
		}
		if prev, dup := ids[folder]; dup {
			t.Fatalf("template.yaml: %s and %s share CodeUri %s", prev, fn.LogicalID, fn.CodeUri)
		}
		ids[folder] = fn.LogicalID
	}
	return ids
}

// Every function folder is deployed by the template, built by its
// build-<LogicalId> target (what `sam build` runs) from that same folder, and
// ships sample events for `sam local invoke -e`.
func TestEveryFunctionHasBuildTargetAndEvents(t *testing.T) {
	folders, err := functionFolders()
	if err != nil {
		t.Fatal(err)
	}
	ids := logicalIDs(t)
	for _, folder := range folders {
		t.Run(folder, func(t *testing.T) {
			if _, err := os.Stat(filepath.Join(repoRoot, "functions", folder, "main.go")); err != nil {
				t.Errorf("functions/%s has no main.go", folder)
			}
			id, ok := ids[folder]
			if !ok {
				t.Fatalf("functions/%s is not the CodeUri of any function in template.yaml", folder)
			}
			artifacts := t.TempDir()
			cmd := exec.Command("make", "--no-print-directory", "-n", "build-"+id, "ARTIFACTS_DIR="+artifacts)
			cmd.Dir = repoRoot
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("make -n build-%s: %v (the Makefile needs a build-%s target for sam build)\n%s", id, err, id, out)
			}
			for _, want := range []string{"./functions/" + folder, "-tags lambda.norpc", "CGO_ENABLED=0", artifacts + "/bootstrap"} {
				if !strings.Contains(string(out), want) {
					t.Errorf("make -n build-%s does not mention %q:\n%s", id, want, out)
				}
			}
			evs, _ := filepath.Glob(filepath.Join(repoRoot, "functions", folder, "events", "*.json"))
			if len(evs) == 0 {
				t.Errorf("functions/%s/events has no sample event (*.json)", folder)
			}
		})
	}
	var orphans []string
	for folder, id := range ids {
		if _, err := os.Stat(filepath.Join(repoRoot, "functions", folder, "main.go")); err != nil {
			orphans = append(orphans, id+" → functions/"+folder)
		}
	}
	sort.Strings(orphans)
	if len(orphans) > 0 {
		t.Errorf("template.yaml deploys folders without a main.go: %v", orphans)
	}
}
