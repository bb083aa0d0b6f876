package lambdatest_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// templateFunction is an AWS::Serverless::Function of template.yaml.
type templateFunction struct {
	LogicalID string
	CodeUri   string
}

var (
	resourceRE = regexp.MustCompile(`^  ([A-Za-z0-9]+):\s*(#.*)?$`)
	typeRE     = regexp.MustCompile(`^    Type:\s*(\S+)`)
	codeUriRE  = regexp.MustCompile(`^      CodeUri:\s*(\S+)`)
	topKeyRE   = regexp.MustCompile(`^[A-Za-z]`)
)

// templateFunctions reads the functions of template.yaml. It relies on the
// template's block style (two-space indentation, one key a line), which
// cfn-lint and this test keep: a reformatted template fails here loudly
// rather than passing with nothing checked.
func templateFunctions(t *testing.T) []templateFunction {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		out        []templateFunction
		inResource bool
		cur        struct{ id, typ, codeURI string }
	)
	flush := func() {
		if cur.typ == "AWS::Serverless::Function" {
			out = append(out, templateFunction{LogicalID: cur.id, CodeUri: strings.TrimSuffix(cur.codeURI, "/")})
		}
		cur.id, cur.typ, cur.codeURI = "", "", ""
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case topKeyRE.MatchString(line):
			flush()
			inResource = strings.HasPrefix(line, "Resources:")
		case !inResource:
		case resourceRE.MatchString(line):
			flush()
			cur.id = resourceRE.FindStringSubmatch(line)[1]
		case typeRE.MatchString(line):
			cur.typ = typeRE.FindStringSubmatch(line)[1]
		case codeUriRE.MatchString(line):
			cur.codeURI = codeUriRE.FindStringSubmatch(line)[1]
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		t.Fatal(err)
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
