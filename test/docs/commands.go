package docs

import (
	"fmt"
	"regexp"
	"strings"
)

// Command is a kubectl command found in Markdown.
type Command struct {
	// Line is the 1-based line on which the command starts.
	Line int
	// Words are the command's words as a shell passes them to kubectl:
	// quotes removed, continuation lines joined. Words[0] is the kubectl
	// binary as written ("kubectl", "bin/kubectl").
	Words []string
	// Text is the command as written, on one line, for messages.
	Text string
}

// Commands returns the kubectl commands in markdown: those on the lines of
// fenced code blocks (a backslash at the end of a line continues the
// command) and those in inline code spans, which may cross line breaks
// within a paragraph. Prose outside code is not a command and is ignored,
// as is anything before the word kubectl on a line.
func Commands(markdown string) []Command {
	lines := strings.Split(markdown, "\n")
	var (
		cmds      []Command
		fence     string // the opening fence while inside a fenced block
		para      []string
		paraStart int
	)
	flush := func() {
		if len(para) > 0 {
			cmds = append(cmds, inlineCommands(strings.Join(para, "\n"), paraStart)...)
			para = nil
		}
	}
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimLeft(lines[i], " \t")
		if fence != "" {
			if closesFence(trimmed, fence) {
				fence = ""
				continue
			}
			start, text := i, lines[i]
			for strings.HasSuffix(text, `\`) && i+1 < len(lines) && !closesFence(strings.TrimLeft(lines[i+1], " \t"), fence) {
				i++
				text += "\n" + lines[i]
			}
			cmds = append(cmds, commandsIn(text, start+1)...)
			continue
		}
		if f := openingFence(trimmed); f != "" {
			flush()
			fence = f
			continue
		}
		if strings.TrimSpace(trimmed) == "" {
			flush()
			continue
		}
		if len(para) == 0 {
			paraStart = i + 1
		}
		para = append(para, lines[i])
	}
	flush()
	return cmds
}

// openingFence returns the run of three or more backticks or tildes that
// opens a fenced code block on line, or "".
func openingFence(line string) string {
	if !strings.HasPrefix(line, "```") && !strings.HasPrefix(line, "~~~") {
		return ""
	}
	n := len(line) - len(strings.TrimLeft(line, line[:1]))
	return line[:n]
}

// closesFence reports whether line closes a block opened by fence: a run of
// the same character at least as long, and nothing else.
func closesFence(line, fence string) bool {
	return strings.HasPrefix(line, fence) && strings.TrimRight(line, fence[:1]+" \t") == ""
}

// inlineCommands returns the kubectl commands in the code spans of a
// paragraph whose first line is firstLine. A span opens with a run of
// backticks and closes with the next run of the same length.
func inlineCommands(para string, firstLine int) []Command {
	var cmds []Command
	for i := 0; i < len(para); {
		if para[i] != '`' {
			i++
			continue
		}
		n := backticks(para[i:])
		closing := -1
		for j := i + n; j < len(para); {
			if para[j] != '`' {
				j++
				continue
			}
			m := backticks(para[j:])
			if m == n {
				closing = j
				break
			}
			j += m
		}
		if closing < 0 {
			// Unmatched backticks are literal text.
			i += n
			continue
		}
		line := firstLine + strings.Count(para[:i+n], "\n")
		cmds = append(cmds, commandsIn(para[i+n:closing], line)...)
		i = closing + n
	}
	return cmds
}

func backticks(s string) int {
	return len(s) - len(strings.TrimLeft(s, "`"))
}

// kubectlWord finds the word kubectl, alone or as the last element of a
// path, so that `kubectl-svm` or "kubectl's" are not commands.
var kubectlWord = regexp.MustCompile(`(?:^|[\s(/"'=])kubectl(?:\s|$)`)

// commandsIn returns the kubectl commands in text, a code line or span
// whose first line is firstLine.
func commandsIn(text string, firstLine int) []Command {
	var cmds []Command
	for _, m := range kubectlWord.FindAllStringIndex(text, -1) {
		start := m[0] + strings.Index(text[m[0]:m[1]], "kubectl")
		// Back up over a path such as bin/kubectl or ./bin/kubectl.
		for start > 0 && !strings.ContainsRune(" \t\n(\"'=", rune(text[start-1])) {
			start--
		}
		words, end := shellWords(text[start:])
		if len(words) == 0 {
			continue
		}
		cmds = append(cmds, Command{
			Line:  firstLine + strings.Count(text[:start], "\n"),
			Words: words,
			Text:  strings.Join(strings.Fields(strings.ReplaceAll(text[start:start+end], "\\\n", " ")), " "),
		})
	}
	return cmds
}

// shellWords splits s as a POSIX shell splits one simple command, and
// returns the words and how many bytes of s they took. It stops at a
// control operator (| & ; ( )), at a comment, or at the end of s. Single
// and double quotes group and are removed; a backslash quotes the next
// character, and before a newline joins the lines. < and > are kept as
// text: the docs write placeholders such as <name>, not redirections.
func shellWords(s string) (words []string, end int) {
	var (
		w      strings.Builder
		inWord bool
		quote  byte
		i      int
	)
loop:
	for ; i < len(s); i++ {
		c := s[i]
		switch quote {
		case '\'':
			if c == '\'' {
				quote = 0
			} else {
				w.WriteByte(c)
			}
			continue
		case '"':
			switch {
			case c == '"':
				quote = 0
			case c == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0:
				i++
				w.WriteByte(s[i])
			default:
				w.WriteByte(c)
			}
			continue
		}
		switch c {
		case '\'', '"':
			quote, inWord = c, true
		case '\\':
			if i+1 < len(s) {
				i++
				if s[i] != '\n' {
					w.WriteByte(s[i])
					inWord = true
				}
			}
		case ' ', '\t', '\n', '\r':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case '|', '&', ';', '(', ')':
			break loop
		case '#':
			if !inWord {
				break loop
			}
			w.WriteByte(c)
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, i
}

// svmResources are the names of svm's resources that must carry a group in
// a kubectl command: plural, singular and kind, compared in lower case as
// kubectl does. Without a group kubectl resolves storageversionmigrations
// to the in-tree storagemigration.k8s.io API on Kubernetes 1.37 and later;
// storagestates are held to the same rule so that the docs name both of
// svm's types one way, and keep working should the in-tree API grow one.
var svmResources = map[string]bool{
	"storageversionmigrations": true,
	"storageversionmigration":  true,
	"storagestates":            true,
	"storagestate":             true,
}

// Unqualified returns the words of a kubectl command that name one of
// svm's resources without a group: a resource argument
// (storageversionmigrations), one of a list (a,b), the resource of a
// resource/name argument, or the value of a flag (--for=storagestate/x).
// A name with any group suffix is left to kubectl; that is what the reader
// wrote on purpose.
func Unqualified(words []string) []string {
	var bad []string
	for _, w := range words[1:] {
		arg := w
		if strings.HasPrefix(arg, "-") {
			_, value, ok := strings.Cut(arg, "=")
			if !ok {
				continue
			}
			arg = value
		}
		resources, _, _ := strings.Cut(arg, "/")
		for r := range strings.SplitSeq(resources, ",") {
			if svmResources[strings.ToLower(strings.TrimRight(r, "."))] {
				bad = append(bad, w)
				break
			}
		}
	}
	return bad
}

// Fence is a fenced code block.
type Fence struct {
	// Line is the 1-based line of its opening fence.
	Line int
	// Info is the info string after the opening fence: the block's
	// language ("sh", "yaml"), or "" when it names none.
	Info string
	// Code is the block's lines, without the fences.
	Code []string
}

// Fences returns the fenced code blocks of markdown, in order.
func Fences(markdown string) []Fence {
	var (
		fences []Fence
		open   string
	)
	for i, line := range strings.Split(markdown, "\n") {
		trimmed := strings.TrimLeft(line, " \t")
		switch {
		case open != "" && closesFence(trimmed, open):
			open = ""
		case open != "":
			f := &fences[len(fences)-1]
			f.Code = append(f.Code, line)
		default:
			if f := openingFence(trimmed); f != "" {
				open = f
				fences = append(fences, Fence{Line: i + 1, Info: strings.TrimSpace(trimmed[len(f):])})
			}
		}
	}
	return fences
}

// ShellCommands returns the commands of a shell block: one per line, a
// backslash at the end of a line continuing it, without the comment that
// may follow. A line that is only a comment, or blank, is none. Text is
// the command as written up to its comment, on one line. A command that
// goes on past its first simple command (a pipe, &&, ;) is an error: the
// docs print commands a reader can run one at a time, and a check can run
// only what it can tell apart.
func (f Fence) ShellCommands() ([]Command, error) {
	var cmds []Command
	for i := 0; i < len(f.Code); i++ {
		start, text := i, f.Code[i]
		for strings.HasSuffix(text, `\`) && i+1 < len(f.Code) {
			i++
			text += "\n" + f.Code[i]
		}
		words, end := shellWords(text)
		if end < len(text) && text[end] != '#' {
			return nil, fmt.Errorf("line %d: %q: more than one command on a line", f.Line+1+start, strings.TrimSpace(text))
		}
		if len(words) == 0 {
			continue
		}
		cmds = append(cmds, Command{
			Line:  f.Line + 1 + start,
			Words: words,
			Text:  strings.Join(strings.Fields(strings.ReplaceAll(text[:end], "\\\n", " ")), " "),
		})
	}
	return cmds, nil
}
