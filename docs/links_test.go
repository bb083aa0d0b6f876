package docs_test

import (
	"bytes"
	"errors"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
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

// outsideMentions are the ways a text leans on something only its authors
// had beside the repository: the steering folder, the design document by its
// file name, the worker this project replaces by its nickname (say "the old
// worker" or "the legacy worker"), the planning thread, its numbered issues
// and its review rounds. Say it in the code's own terms or link docs/.
//
// The patterns are narrow on purpose: a fuzz seed corpus, a random seed,
// seeded rows or a round trip stay allowed. Words may be split by a line
// break and a comment marker (//, #, --, *). Each pattern is written so that
// its own source does not match it, so this file is scanned like any other.
var outsideMentions = []*regexp.Regexp{
	regexp.MustCompile(`\.\./(\.\./)*shared/`),
	regexp.MustCompile(`(?i)\bdesign[.]md\b`),
	regexp.MustCompile(`(?i)\bthe[\s/#*-]+seed\b`),
	regexp.MustCompile(`(?i)\bseed['’]s\b`),
	regexp.MustCompile(`(?i)\bthe[\s/#*-]+issue\b`),
	regexp.MustCompile(`(?i)\bissues?[\s/#*-]+#?[0-9]+\b`),
	regexp.MustCompile(`(?i)\b(first|second|third|fourth)[\s/#*-]+round\b`),
	regexp.MustCompile(`(?i)\bdesign[\s/#*-]+card\b`),
}

// allowedMentions are the only lines that may match outsideMentions:
// README.md's section listing where we depart from the design we were
// given, which must name what it departs from.
var allowedMentions = map[string]string{
	"README.md": "## Where we depart from the original " + "design" + " card",
}

// mention is one outside mention: its line and the words that matched.
type mention struct {
	line  int
	words string
}

// outsideMentionsIn returns the outside mentions of a file's text (rel is
// its path from the repository's root) that allowedMentions does not allow.
func outsideMentionsIn(rel string, text string) []mention {
	var found []mention
	for _, re := range outsideMentions {
		for _, loc := range re.FindAllStringIndex(text, -1) {
			lineStart := strings.LastIndexByte(text[:loc[0]], '\n') + 1
			lineEnd := len(text)
			if i := strings.IndexByte(text[loc[0]:], '\n'); i >= 0 {
				lineEnd = loc[0] + i
			}
			if allowed, ok := allowedMentions[rel]; ok && text[lineStart:lineEnd] == allowed {
				continue
			}
			found = append(found, mention{strings.Count(text[:loc[0]], "\n") + 1, text[loc[0]:loc[1]]})
		}
	}
	return found
}

// trackedTextFiles lists the repository's tracked files (git ls-files), or,
// where git or the .git folder is missing, every file but the build outputs
// and local tool folders; only text (UTF-8 without NUL bytes) is kept. Paths
// are relative to root, with forward slashes.
func trackedTextFiles(t *testing.T, root string) map[string]string {
	t.Helper()
	var paths []string
	if out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output(); err == nil && len(out) > 0 {
		paths = strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	} else {
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch {
			case d.IsDir() && slices.Contains([]string{".git", "build", "bin", ".venv", "node_modules", ".aws-sam"}, d.Name()):
				return filepath.SkipDir
			case !d.IsDir() && d.Name() != ".git": // a worktree's .git is a file
				rel, err := filepath.Rel(root, path)
				if err != nil {
					return err
				}
				paths = append(paths, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{}
	for _, p := range paths {
		raw, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			t.Fatal(err)
		}
		if bytes.IndexByte(raw, 0) >= 0 || !utf8.Valid(raw) {
			continue
		}
		files[p] = string(raw)
	}
	return files
}

// No text of ours points outside the repository: not the steering folder
// beside it, nor the documents, threads and rounds its authors worked from
// (outsideMentions), in Go, SQL, Markdown, YAML, the Makefile, the CI script
// or any other text file.
func TestNothingPointsOutsideTheRepository(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	files := trackedTextFiles(t, root)
	// The scan must reach every kind of text, or it proves nothing.
	for _, want := range []string{"README.md", "Makefile", "template.yaml", "migrations/00001_outbox.sql",
		"docs/links_test.go", "bench/results.md", ".ci/run"} {
		if _, ok := files[want]; !ok {
			t.Errorf("%s is not among the %d text files scanned", want, len(files))
		}
	}
	for _, rel := range slices.Sorted(maps.Keys(files)) {
		for _, m := range outsideMentionsIn(rel, files[rel]) {
			t.Errorf("%s:%d refers outside the repository: %q", rel, m.line, m.words)
		}
	}
}

// The patterns catch each kind of outside mention, also split over a
// comment's lines, and leave the ordinary uses of the same words alone. The
// mentions are built from two pieces so this file passes its own scan.
func TestOutsideMentionPatterns(t *testing.T) {
	t.Parallel()
	for _, text := range []string{
		"see ../../" + "shared/x", "as " + "DESIGN" + ".md states", "the " + "seed never did",
		"// columns the\n// " + "seed worker", "-- the\n-- " + "seed reads", "the " + "seed" + "'s claim",
		"The " + "issue's scenarios", "the run of " + "issue" + " 5", "the " + "first" + " round's claim",
		"# " + "Third" + " round", "the original " + "design" + " card",
	} {
		if len(outsideMentionsIn("docs/x.md", text)) == 0 {
			t.Errorf("%q is not caught", text)
		}
	}
	for _, text := range []string{
		"their seeds also run in make test", "a fuzz seed corpus", "f.Add(seed)", "a random seed",
		"what one sample event must do to the seeded rows", "each event starts from the same seed",
		"jobs are seeded round-robin", "3 unmeasured rounds first", "a round trip", "seedJobs inserts",
		"the legacy worker's claim", "an issue with the lease",
	} {
		if found := outsideMentionsIn("docs/x.md", text); len(found) > 0 {
			t.Errorf("%q is flagged (%q)", text, found[0].words)
		}
	}
	// The one allowed line is allowed in README.md only, and only as is.
	heading := "## Where we depart from the original " + "design" + " card"
	if len(outsideMentionsIn("README.md", "intro\n"+heading+"\n- a departure")) > 0 {
		t.Errorf("README.md's departure heading is flagged")
	}
	if len(outsideMentionsIn("README.md", heading+" and more")) == 0 {
		t.Errorf("a longer line in README.md naming the %s card is not caught", "design")
	}
	if len(outsideMentionsIn("docs/deploy.md", heading)) == 0 {
		t.Errorf("the departure heading outside README.md is not caught")
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
