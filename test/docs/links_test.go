package docs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/svm-project/svm/test/docs"
)

// markdownFiles returns README.md, CONTRIBUTING.md and docs/*.md,
// relative to the repository's root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("found no docs/*.md under %s", repoRoot())
	}
	rel := []string{"README.md", "CONTRIBUTING.md"}
	for _, f := range files {
		r, _ := filepath.Rel(repoRoot(), f)
		rel = append(rel, r)
	}
	return rel
}

// TestDocLinksResolve follows every relative link of README.md, CONTRIBUTING.md and
// docs/*.md: its file must exist, and its #fragment must be a heading of
// that file, as GitHub names headings. A section moved to another page
// leaves no link behind pointing at where it was.
func TestDocLinksResolve(t *testing.T) {
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		data, err := os.ReadFile(filepath.Join(repoRoot(), path))
		if err != nil {
			t.Fatal(err)
		}
		anchors[path] = headingAnchors(string(data))
		return anchors[path]
	}
	checked := 0
	for _, file := range markdownFiles(t) {
		data, err := os.ReadFile(filepath.Join(repoRoot(), file))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links(string(data)) {
			if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
				continue
			}
			checked++
			path, fragment, _ := strings.Cut(l.target, "#")
			target := file
			if path != "" {
				target = filepath.Clean(filepath.Join(filepath.Dir(file), path))
				if _, err := os.Stat(filepath.Join(repoRoot(), target)); err != nil {
					t.Errorf("%s:%d: link to %s: %s does not exist", file, l.line, l.target, target)
					continue
				}
			}
			if fragment == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				t.Errorf("%s:%d: link to %s: a fragment of a file that is not Markdown", file, l.line, l.target)
				continue
			}
			if !anchorsOf(target)[fragment] {
				t.Errorf("%s:%d: link to %s: %s has no heading #%s", file, l.line, l.target, target, fragment)
			}
		}
	}
	if checked < 30 {
		t.Fatalf("followed only %d links; the scanner misses them", checked)
	}
}

type link struct {
	line   int
	target string
}

// linkPattern is an inline link, [text](target), whose text may cross a
// line break of its paragraph.
var linkPattern = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)

// links returns the inline links of markdown outside code blocks and code
// spans, where brackets are text.
func links(markdown string) []link {
	text := codeSpan.ReplaceAllStringFunc(strings.Join(outsideFences(markdown), "\n"), func(s string) string {
		return strings.Map(func(r rune) rune {
			if r == '\n' {
				return r
			}
			return ' '
		}, s)
	})
	var out []link
	for _, m := range linkPattern.FindAllStringSubmatchIndex(text, -1) {
		out = append(out, link{line: 1 + strings.Count(text[:m[0]], "\n"), target: text[m[2]:m[3]]})
	}
	return out
}

var codeSpan = regexp.MustCompile("`[^`]*`")

// outsideFences returns markdown's lines with those of fenced code blocks
// blanked, so that line numbers stay.
func outsideFences(markdown string) []string {
	lines := strings.Split(markdown, "\n")
	for _, f := range docs.Fences(markdown) {
		for i := f.Line - 1; i <= f.Line+len(f.Code) && i < len(lines); i++ {
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchors returns the fragments GitHub gives markdown's headings:
// lower case, punctuation dropped, spaces as hyphens, and a repeated one
// numbered.
func headingAnchors(markdown string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range outsideFences(markdown) {
		heading, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		slug := strings.Map(func(r rune) rune {
			switch {
			case r == ' ':
				return '-'
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				return unicode.ToLower(r)
			}
			return -1
		}, strings.TrimSpace(heading))
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

func TestHeadingAnchors(t *testing.T) {
	got := headingAnchors("# Design\n\n## `svm check-upgrade`\n### With the in-tree migrator (Kubernetes 1.37 and later)\n## Pruning `storedVersions`\n## Notes\n## Notes\n    # not a heading\n#hashtag\n```sh\n# a comment\n```\n")
	for _, want := range []string{"design", "svm-check-upgrade", "with-the-in-tree-migrator-kubernetes-137-and-later", "pruning-storedversions", "notes", "notes-1"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if len(got) != 6 {
		t.Errorf("anchors %v, want 6", got)
	}
}

func TestLinks(t *testing.T) {
	md := "See [design](design.md#pacing) and [the\nREADME](../README.md).\n\n```sh\n[not](a-link.md)\n```\n`[nor](this.md)` [x](https://example.com)\n"
	got := links(md)
	want := []link{{1, "design.md#pacing"}, {1, "../README.md"}, {7, "https://example.com"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("links %v, want %v", got, want)
	}
}

// TestNoParagraphTwice: a paragraph (or table) of the docs says its thing
// in one place. A section moved from the README to docs/ is moved, not
// copied, so that the two cannot drift apart.
func TestNoParagraphTwice(t *testing.T) {
	seen := map[string]string{}
	for _, file := range markdownFiles(t) {
		data, err := os.ReadFile(filepath.Join(repoRoot(), file))
		if err != nil {
			t.Fatal(err)
		}
		lines := outsideFences(string(data))
		start := 0
		for i := 0; i <= len(lines); i++ {
			if i < len(lines) && strings.TrimSpace(lines[i]) != "" {
				continue
			}
			para := strings.Join(strings.Fields(strings.Join(lines[start:i], " ")), " ")
			where := fmt.Sprintf("%s:%d", file, start+1)
			start = i + 1
			if len(para) < 160 {
				continue // a heading, a short line that may well recur
			}
			if first, ok := seen[para]; ok {
				t.Errorf("%s repeats the paragraph of %s: keep it in one place and link to it\n%.120s…", where, first, para)
				continue
			}
			seen[para] = where
		}
	}
	if len(seen) < 100 {
		t.Fatalf("found only %d paragraphs; the scanner misses them", len(seen))
	}
}
