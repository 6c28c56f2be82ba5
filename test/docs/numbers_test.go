package docs_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/svm-project/svm/internal/cli"
	"github.com/svm-project/svm/internal/health"
	"github.com/svm-project/svm/internal/intree"
	"github.com/svm-project/svm/internal/migrator"
)

// svmFlags returns every flag of every svm command, by name: the flags as
// the binary defines them, with their defaults and help texts.
func svmFlags() map[string][]*pflag.Flag {
	flags := map[string][]*pflag.Flag{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		add := func(f *pflag.Flag) { flags[f.Name] = append(flags[f.Name], f) }
		c.Flags().VisitAll(add)
		c.PersistentFlags().VisitAll(add)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(cli.NewRootCommand(io.Discard, io.Discard))
	return flags
}

// flagMention is a flag named in backticks and the value the docs give it
// in the parentheses that follow, a few words later at most: "`--workers`
// (default 64)", "`--trigger-interval` (10 minutes)", "`--chunk-size`
// (500)".
var flagMention = regexp.MustCompile("`--([a-z0-9-]+)`[^`.;:()]{0,25}\\((?:default )?(`[^`]*`|[^),;:]+?)(?: by default)?[),;:]")

// TestDocsStateFlagDefaults compares every default the docs give a flag
// of svm's in parentheses after its name with the default the flag has.
// A value that reads as a number or a duration must be the flag's; other
// parentheses ("(and `--burst`)") are not a default and are passed over.
func TestDocsStateFlagDefaults(t *testing.T) {
	flags := svmFlags()
	compared := 0
	for _, file := range markdownFiles(t) {
		data, err := os.ReadFile(filepath.Join(repoRoot(), file))
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(outsideFences(string(data)), "\n")
		for _, m := range flagMention.FindAllStringSubmatchIndex(text, -1) {
			name, value := text[m[2]:m[3]], strings.TrimSpace(text[m[4]:m[5]])
			line := 1 + strings.Count(text[:m[0]], "\n")
			defs := flags[name]
			if len(defs) == 0 {
				continue // another program's flag
			}
			ok, stated := false, false
			for _, f := range defs {
				agrees, states := sameDefault(f, value)
				ok, stated = ok || agrees, stated || states
			}
			if !stated {
				continue
			}
			compared++
			if !ok {
				var have []string
				for _, f := range defs {
					if !slices.Contains(have, f.DefValue) {
						have = append(have, f.DefValue)
					}
				}
				t.Errorf("%s:%d: the docs give --%s the default %q; svm's is %s", file, line, name, value, strings.Join(have, " or "))
			}
		}
	}
	if compared < 15 {
		t.Fatalf("compared only %d flag defaults; the scanner misses them", compared)
	}
}

// chartDefault is a value of the chart's values.yaml left empty whose
// comment gives svm's default: "(svm's default: 64).\n  workers: null",
// the comment's lines joined.
var chartDefault = regexp.MustCompile(`\(svm's\s+default:\s+([^),]+)[^)]*\)\.?\n\s*(\w+):\s*null`)

// TestChartStatesSvmDefaults compares the default of svm's that the
// chart's values.yaml gives for each controller flag it leaves to svm
// with the flag's own.
func TestChartStatesSvmDefaults(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(), "charts", "svm", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := regexp.MustCompile(`\n\s*# `).ReplaceAllString(string(data), " ")
	flags := svmFlags()
	compared := 0
	for _, m := range chartDefault.FindAllStringSubmatch(text, -1) {
		value, key := strings.TrimSpace(m[1]), m[2]
		name := strings.ToLower(regexp.MustCompile(`[A-Z]`).ReplaceAllString(key, "-$0"))
		defs := flags[name]
		if len(defs) == 0 {
			t.Errorf("values.yaml: controller.%s names svm's default, but svm has no flag --%s", key, name)
			continue
		}
		if agrees, states := sameDefault(defs[0], value); !states || !agrees {
			t.Errorf("values.yaml: controller.%s: svm's default is %q, not %q", key, defs[0].DefValue, value)
		}
		compared++
	}
	if compared < 3 {
		t.Fatalf("compared %d of the chart's values with svm's defaults, want maxParallel, workers and qps at least", compared)
	}
}

// sameDefault reports whether value, as the docs write it, is f's default,
// and whether value states one at all (a number, a duration, or a string
// in backticks, as f's type takes).
func sameDefault(f *pflag.Flag, value string) (agrees, states bool) {
	switch f.Value.Type() {
	case "duration":
		d, err := parseDuration(value)
		if err != nil {
			return false, startsLikeANumber(value)
		}
		want, err := time.ParseDuration(f.DefValue)
		return err == nil && d == want, true
	case "int", "int64", "float64":
		if value == "unlimited" {
			value = "0"
		}
		n, err := parseNumber(value)
		if err != nil {
			return false, startsLikeANumber(value)
		}
		want, err := strconv.ParseFloat(f.DefValue, 64)
		return err == nil && n == want, true
	case "string", "stringSlice", "stringArray":
		s, ok := strings.CutPrefix(value, "`")
		if !ok {
			return false, false
		}
		s, _, _ = strings.Cut(s, "`")
		return s == strings.Trim(f.DefValue, "[]"), true
	}
	return false, false
}

func startsLikeANumber(s string) bool {
	first, _, _ := strings.Cut(s, " ")
	_, word := numberWords[first]
	return word || s != "" && s[0] >= '0' && s[0] <= '9'
}

var numberWords = map[string]float64{
	"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
	"seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
}

// aNumber matches a number as parseNumber reads it.
const aNumber = `[\d,.]*\d|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve`

// parseNumber reads 64, 100,000, 0.95 or twelve.
func parseNumber(s string) (float64, error) {
	if n, ok := numberWords[s]; ok {
		return n, nil
	}
	return strconv.ParseFloat(strings.ReplaceAll(s, ",", ""), 64)
}

var durationUnits = map[string]time.Duration{
	"ms": time.Millisecond, "s": time.Second, "second": time.Second, "seconds": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute, "minutes": time.Minute,
	"h": time.Hour, "hour": time.Hour, "hours": time.Hour,
}

// parseDuration reads 2s, 5m, 15 s, 200 ms, 10 minutes, one minute or an
// hour.
func parseDuration(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	number, unit, ok := strings.Cut(s, " ")
	if !ok {
		return 0, fmt.Errorf("%q is no duration", s)
	}
	n, err := parseNumber(number)
	u, known := durationUnits[unit]
	if err != nil || !known {
		return 0, fmt.Errorf("%q is no duration", s)
	}
	return time.Duration(n * float64(u)), nil
}

// ordinals are the shares the docs write in words: "under half the best"
// is 1/2.
var ordinals = map[string]float64{"half": 2, "third": 3, "quarter": 4, "fifth": 5, "eighth": 8, "tenth": 10}

// fraction reads 0.95, or a share in words: "nine tenths" is 0.9.
func fraction(s string) (float64, error) {
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		return n, nil
	}
	number, share, ok := strings.Cut(s, " ")
	if !ok {
		return 0, fmt.Errorf("%q is no fraction", s)
	}
	n, err := parseNumber(number)
	d, known := ordinals[strings.TrimSuffix(share, "s")]
	if err != nil || !known {
		return 0, fmt.Errorf("%q is no fraction", s)
	}
	return n / d, nil
}

// kneeTexts are, besides the docs, where svm tells its users the knee's
// share of the best rate: the API's field, the metric's help, what `svm
// status` prints, and the pacer's own doc.
var kneeTexts = []string{
	"api/migration/v1alpha1/storageversionmigration_types.go",
	"config/crd/bases/migration.k8s.io_storageversionmigrations.yaml",
	"internal/metrics/metrics.go",
	"internal/status/print.go",
	"internal/migrator/pacer.go",
}

// A docNumber is a number the docs (or a help text) share with the code:
// every match of pattern's one group in the files is read by parse and
// must equal want, and there must be one unless the check says a text
// need only state it right.
type docNumber struct {
	name    string
	files   []string
	pattern string
	parse   func(string) (float64, error)
	want    float64
}

func durationValue(s string) (float64, error) {
	d, err := parseDuration(s)
	return float64(d), err
}

func ordinalValue(s string) (float64, error) {
	if n, ok := ordinals[s]; ok {
		return n, nil
	}
	return 0, fmt.Errorf("%q is no share", s)
}

// TestDocsStateTheCodesNumbers compares the numbers the docs and help
// texts share with the code beyond flag defaults, pacing's above all, with
// the code's values: the package's exported constants where there are
// some, and otherwise the constants and defaults as the source writes
// them.
func TestDocsStateTheCodesNumbers(t *testing.T) {
	pacer := func(name string) float64 { return goValue(t, "internal/migrator/pacer.go", "const "+name) }
	engine := func(lhs string) float64 { return goValue(t, "internal/migrator/migrator.go", "assign "+lhs) }
	design, readme := []string{"docs/design.md"}, []string{"README.md"}
	all := markdownFiles(t)
	flags := svmFlags()
	triggerInterval, err := time.ParseDuration(flags["trigger-interval"][0].DefValue)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []docNumber{
		// Pacing (internal/migrator/pacer.go).
		{"the knee's share of the best rate", append(slices.Clone(all), kneeTexts...), `(\d\.\d+) of\s+the\s+best\s+rate`, parseNumber, pacer("kneeFraction")},
		{"the window above the knee", design, `about (\d\.\d+) times\s+the\s+knee`, parseNumber, pacer("kneeMargin") + pacer("probeSpread")},
		{"the window above the knee", design, `set to (\d\.\d+) times\s+the\s+knee`, parseNumber, pacer("kneeMargin") + pacer("probeSpread")},
		{"the probe below the knee", design, `other\s+epoch,\s+to (\d\.\d+) times\s+it`, parseNumber, 1 - pacer("probeSpread")},
		{"the probe below the most workers", design, `probes\s+a\s+(\w+)\s+lower`, ordinalValue, 1 / (2 * pacer("probeSpread"))},
		{"the points the knee is read from", design, `From\s+the\s+last\s+(\w+)\s+points`, parseNumber, pacer("modelEpochs")},
		{"the shortest epoch", design, `at\s+least\s+(\d+\s+ms)\.`, durationValue, pacer("minEpoch")},
		{"a surge", design, `rate\s+is\s+under\s+(\w+)\s+the\s+knee's\s+rate`, ordinalValue, pacer("surgeFactor")},
		{"the points read as one", design, `points\s+within\s+a\s+(\w+)\s+of\s+its\s+writes`, ordinalValue, 1 / pacer("sameWindow")},
		{"a slowdown's epochs", design, `\*\*slowdown\*\*\s+is\s+a\s+surge\s+too:\s+(\w+)\s+epochs`, parseNumber, pacer("slowdownEpochs")},
		{"a slowdown's share of the knee's rate", design, `slower\s+than\s+(\w+\s+\w+)\s+of\s+the\s+knee's\s+rate`, fraction, pacer("slowdownFraction")},
		{"the latency smoothing", design, `each\s+weighing\s+an\s+(\w+)`, ordinalValue, pacer("smoothing")},
		{"the most workers", design, `not\s+all\s+(\d+)\.`, parseNumber, migrator.DefaultWorkers},
		{"the most workers", readme, "`--workers` \\(default (\\d+)\\)", parseNumber, migrator.DefaultWorkers},
		// The engine's retries and bounds (internal/migrator/migrator.go).
		{"the first retry", design, `(\d+\s+ms)\s+doubling\s+to\s+\d+\s+s`, durationValue, engine("o.Retry.Initial")},
		{"the longest retry", design, `\d+\s+ms\s+doubling\s+to\s+(\d+\s+s)`, durationValue, engine("o.Retry.Max")},
		{"the attempts", design, `(\d+)\s+attempts\)`, parseNumber, engine("o.Retry.Attempts")},
		{"a request's deadline", design, `own\s+deadline\s+\((\d+\s+min)`, durationValue, engine("o.RequestTimeout")},
		{"the failed objects named", design, `at\s+most\s+(\d+),\s+all\s+counted`, parseNumber, engine("o.MaxFailedObjects")},
		{"the writes remembered", design, `at\s+most\s+([\d,]+)\s+names`, parseNumber, goValue(t, "internal/migrator/migrator.go", "const maxRecordedChanges")},
		// The controllers.
		{"the controller's first retry", design, `exponential\s+backoff\s+\((\d+\s+s)\s+doubling`, durationValue,
			goValue(t, "internal/controller/migration/controller.go", "call workqueue.NewTypedItemExponentialFailureRateLimiter 0")},
		{"the controller's longest retry", design, `backoff\s+\(\d+\s+s\s+doubling\s+to\s+(\d+\s+min)\)`, durationValue,
			goValue(t, "internal/controller/migration/controller.go", "call workqueue.NewTypedItemExponentialFailureRateLimiter 1")},
		{"the trigger's longest retry", all, `doubling\s+per\s+failure\s+up\s+to\s+(an\s+hour)`, durationValue,
			goValue(t, "internal/controller/storagestate/controller.go", "assign c.RetryMax")},
		{"the prune's retry", design, `retries\s+(\d+\s+seconds)\s+later`, durationValue,
			goValue(t, "internal/controller/storagestate/apply.go", "const pruneWait")},
		{"the probe migration's wait", all, `probe\s+migration[^.]*?\s+within\s+(\d+\s+seconds)`, durationValue,
			goValue(t, "internal/intree/probe.go", "assign startTimeout")},
		{"the migrations handed over at once", all, `\b(` + aNumber + `)\s+(?:migrations\s+)?are\s+handed\s+over\s+at\s+once`, parseNumber, intree.RunnerWorkers},
		{"the in-tree runner's workers", all, `migrator\s+runs\s+(` + aNumber + `)\b`, parseNumber, intree.RunnerWorkers},
		{"the leader's renew deadline", []string{"docs/metrics.md"}, `renew\s+deadline,\s+(\d+\s+s)`, durationValue,
			goValue(t, "internal/controller/manager/probes.go", "key RenewDeadline")},
		{"a stalled trigger", []string{"docs/metrics.md"}, `\s(\d+\s+minutes)\s+by\s+default`, durationValue, float64(health.StallAfter(triggerInterval))},
	} {
		checkDocNumber(t, n, readFiles(t, n.files), true)
	}
	// Pacing was once said to aim at a share of the server's ceiling; a
	// text that still says so must name the knee's share.
	ceiling := docNumber{"the knee's share of the ceiling", append(slices.Clone(all), kneeTexts...),
		`(\d\.\d+|\w+\s+tenths)\s+of\s+(?:its|the\s+server's)\s+ceiling`, fraction, pacer("kneeFraction")}
	checkDocNumber(t, ceiling, readFiles(t, ceiling.files), false)

	// Help texts: what `svm <command> --help` says of a number must be the
	// code's too.
	help := func(flag string) map[string]string {
		return map[string]string{"svm --" + flag + " help": flags[flag][0].Usage}
	}
	for _, n := range []struct {
		docNumber
		flag string
	}{
		{docNumber{name: "the knee's share of the best rate", pattern: `(\d\.\d+|\w+\s+tenths)\s+of\s+(?:the\s+best\s+rate|its\s+ceiling)`,
			parse: fraction, want: pacer("kneeFraction")}, "adaptive-pacing"},
		{docNumber{name: "the trigger's longest retry", pattern: `up\s+to\s+(an\s+hour)`, parse: durationValue,
			want: goValue(t, "internal/controller/storagestate/controller.go", "assign c.RetryMax")}, "trigger-retry-delay"},
	} {
		checkDocNumber(t, n.docNumber, help(n.flag), true)
	}
}

func readFiles(t *testing.T, files []string) map[string]string {
	t.Helper()
	texts := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(repoRoot(), f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".go") {
			// A comment's sentences run on across its lines' markers.
			data = commentMarker.ReplaceAll(data, nil)
		}
		texts[f] = string(data)
	}
	return texts
}

var commentMarker = regexp.MustCompile(`(?m)^[ \t]*// ?`)

func checkDocNumber(t *testing.T, n docNumber, texts map[string]string, required bool) {
	t.Helper()
	re := regexp.MustCompile(n.pattern)
	found := 0
	for name, text := range texts {
		for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
			found++
			s := strings.Join(strings.Fields(text[m[2]:m[3]]), " ")
			line := 1 + strings.Count(text[:m[0]], "\n")
			got, err := n.parse(s)
			switch {
			case err != nil:
				t.Errorf("%s:%d: %s: %v", name, line, n.name, err)
			case math.Abs(got-n.want) > 1e-9*math.Abs(n.want):
				t.Errorf("%s:%d: %s is %q, the code's is %s", name, line, n.name, s, formatValue(n.want, s))
			}
		}
	}
	if found == 0 && required {
		t.Errorf("%s: %s no longer matches /%s/: say it as the code has it (%v), and change the pattern with the text", n.name, names(texts), n.pattern, n.want)
	}
}

func names(texts map[string]string) string {
	var out []string
	for name := range texts {
		out = append(out, name)
	}
	return strings.Join(out, ", ")
}

// formatValue writes the code's value as the docs' was written: a
// duration as a duration.
func formatValue(want float64, written string) string {
	if _, err := parseDuration(written); err == nil {
		return time.Duration(want).String()
	}
	return strconv.FormatFloat(want, 'g', -1, 64)
}

// goValue reads a number from svm's source, in file (relative to the
// repository's root), where locator says:
//
//   - "const NAME": the constant NAME;
//   - "assign LHS": the first assignment to LHS (o.Retry.Max, x :=); of a
//     defaulting call such as cmp.Or(x, D), its last argument D;
//   - "key NAME": the value of the first composite literal's field NAME;
//   - "call FUNC N": the Nth argument (from 0) of the first call of FUNC.
//
// It reads what the source writes, a constant expression of numbers,
// time's units and the file's constants, for numbers the package does not
// export.
func goValue(t *testing.T, file, locator string) float64 {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(repoRoot(), file), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]ast.Expr{}
	ast.Inspect(f, func(n ast.Node) bool {
		if d, ok := n.(*ast.GenDecl); ok && d.Tok == token.CONST {
			for _, s := range d.Specs {
				vs := s.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						consts[name.Name] = vs.Values[i]
					}
				}
			}
		}
		return true
	})
	kind, what, _ := strings.Cut(locator, " ")
	var expr ast.Expr
	switch kind {
	case "const":
		expr = consts[what]
	case "assign":
		ast.Inspect(f, func(n ast.Node) bool {
			if a, ok := n.(*ast.AssignStmt); ok && expr == nil && len(a.Lhs) == 1 && len(a.Rhs) == 1 && source(a.Lhs[0]) == what {
				expr = a.Rhs[0]
				if call, ok := expr.(*ast.CallExpr); ok && strings.HasSuffix(strings.ToLower(source(call.Fun)), "or") && len(call.Args) > 1 {
					expr = call.Args[len(call.Args)-1]
				}
			}
			return expr == nil
		})
	case "key":
		ast.Inspect(f, func(n ast.Node) bool {
			if kv, ok := n.(*ast.KeyValueExpr); ok && expr == nil && source(kv.Key) == what {
				expr = kv.Value
			}
			return expr == nil
		})
	case "call":
		fun, index, _ := strings.Cut(what, " ")
		i, _ := strconv.Atoi(index)
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok && expr == nil && source(uninstantiated(call.Fun)) == fun && i < len(call.Args) {
				expr = call.Args[i]
			}
			return expr == nil
		})
	}
	if expr == nil {
		t.Fatalf("%s: found no %s: change this test with the code", file, locator)
	}
	v, err := evalConst(expr, consts)
	if err != nil {
		t.Fatalf("%s: %s: %v", file, locator, err)
	}
	return v
}

// uninstantiated is a generic function without its type arguments.
func uninstantiated(e ast.Expr) ast.Expr {
	switch e := e.(type) {
	case *ast.IndexExpr:
		return e.X
	case *ast.IndexListExpr:
		return e.X
	}
	return e
}

func source(e ast.Expr) string {
	var b strings.Builder
	_ = printer.Fprint(&b, token.NewFileSet(), e)
	return b.String()
}

var timeUnits = map[string]time.Duration{
	"Nanosecond": time.Nanosecond, "Microsecond": time.Microsecond, "Millisecond": time.Millisecond,
	"Second": time.Second, "Minute": time.Minute, "Hour": time.Hour,
}

// evalConst evaluates a constant expression: numbers, time's units, the
// file's constants, + - * / and conversions.
func evalConst(e ast.Expr, consts map[string]ast.Expr) (float64, error) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.INT && e.Kind != token.FLOAT {
			return 0, fmt.Errorf("%s is not a number", e.Value)
		}
		return strconv.ParseFloat(strings.ReplaceAll(e.Value, "_", ""), 64)
	case *ast.ParenExpr:
		return evalConst(e.X, consts)
	case *ast.Ident:
		if c, ok := consts[e.Name]; ok {
			return evalConst(c, consts)
		}
	case *ast.SelectorExpr:
		if u, ok := timeUnits[e.Sel.Name]; ok && source(e.X) == "time" {
			return float64(u), nil
		}
	case *ast.CallExpr:
		if len(e.Args) == 1 {
			return evalConst(e.Args[0], consts)
		}
	case *ast.BinaryExpr:
		x, err := evalConst(e.X, consts)
		if err != nil {
			return 0, err
		}
		y, err := evalConst(e.Y, consts)
		if err != nil {
			return 0, err
		}
		switch e.Op {
		case token.ADD:
			return x + y, nil
		case token.SUB:
			return x - y, nil
		case token.MUL:
			return x * y, nil
		case token.QUO:
			return x / y, nil
		}
	}
	return 0, fmt.Errorf("cannot evaluate %s", source(e))
}
