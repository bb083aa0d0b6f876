package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// markdownFiles lists README.md and every Markdown file of the repository
// (but the build outputs and local tool folders).
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "build" || d.Name() == "bin" || d.Name() == ".venv" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// The repository carries its own design: every relative link of its
// Markdown resolves to a file inside it, and no document, comment or test
// points outside it.
func TestDocsLinksResolveInsideTheRepository(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	files := markdownFiles(t, root)
	if len(files) < 8 {
		t.Fatalf("found only %d Markdown files under %s", len(files), root)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(raw), -1) {
			target := m[1]
			if strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			abs := filepath.Join(filepath.Dir(f), target)
			rel, err := filepath.Rel(root, abs)
			if err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("%s links %s, outside the repository", f, m[1])
				continue
			}
			if _, err := os.Stat(abs); err != nil {
				t.Errorf("%s links %s, which does not exist", f, m[1])
			}
		}
	}
}

// No file of ours names the steering folder beside the repository.
func TestNothingPointsOutsideTheRepository(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	outside := regexp.MustCompile(`\.\./(\.\./)*shared/`)
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "build" || d.Name() == "bin" || d.Name() == ".venv" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !(strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".md") || strings.HasSuffix(path, ".yaml") ||
			strings.HasSuffix(path, ".sql") || strings.HasSuffix(path, ".ts") || d.Name() == "Makefile" || d.Name() == "run") {
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// This file names the pattern it refuses.
		if strings.HasSuffix(path, "links_test.go") {
			return nil
		}
		if loc := outside.FindIndex(raw); loc != nil {
			t.Errorf("%s refers outside the repository: %q", path, raw[loc[0]:loc[1]])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// README.md is a front page a newcomer reads in five minutes.
func TestReadmeIsAShortFrontPage(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > 12*1024 {
		t.Errorf("README.md is %d bytes, want at most 12 KiB (move detail into docs/)", len(raw))
	}
	first := strings.Join(strings.SplitN(string(raw), "\n", 61)[:60], "\n")
	for _, want := range []string{"make demo", "make test"} {
		if !strings.Contains(first, want) {
			t.Errorf("README.md's first screen lacks %q", want)
		}
	}
}
