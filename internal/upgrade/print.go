package upgrade

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/svm-project/svm/internal/document"
)

// WriteTable prints r as a table, one row per resource checked, then a
// summary. Nothing is cut: the reasons are what an operator acts on.
// Versions in the resource's own group are shown without it.
func WriteTable(w io.Writer, r *Report) error {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tSTORED\tTARGET DECODES\tVERDICT\tWHY")
	for _, res := range r.Resources {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", res.Name, storedCell(res), versionsCell(res.Group, res.TargetDecodes), res.Verdict, oneLine(strings.Join(res.Reasons, "; ")))
	}
	_ = tw.Flush()
	b.WriteString("\n" + Summary(r) + "\n")
	for _, res := range r.Resources {
		for _, cmd := range res.Fix {
			fmt.Fprintf(&b, "fix %s: %s\n", res.Name, cmd)
		}
	}
	if rel := r.Release; rel != nil {
		fmt.Fprintf(&b, "target: Kubernetes %s (the server runs %s)\n", rel.To, rel.Server)
		for _, l := range rel.Limits {
			b.WriteString("not known: " + l + "\n")
		}
	}
	if n := len(r.NotChecked); n > 0 {
		fmt.Fprintf(&b, "not checked: %d other %s svm knows of, whose decodable versions were not given (-o json lists them)\n", n, plural(n, "resource", "resources"))
	}
	if !r.SVMAPIServed {
		b.WriteString("svm's CRDs are not installed: no StorageStates were read\n")
	}
	if !r.StorageVersionAPIServed {
		b.WriteString("the StorageVersion API (internal.apiserver.k8s.io/v1alpha1) is not served: agreement between API servers was not checked\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Summary is the one-line conclusion of r.
func Summary(r *Report) string {
	count := map[Verdict]int{}
	for _, res := range r.Resources {
		count[res.Verdict]++
	}
	n := len(r.Resources)
	of := fmt.Sprintf("%d of %d %s checked", count[r.Verdict], n, plural(n, "resource", "resources"))
	switch r.Verdict {
	case VerdictUnsafe:
		return "unsafe: " + of + " may hold objects the target cannot read"
	case VerdictUnknown:
		return "unknown: for " + of + " svm cannot tell what is stored; nothing found is unsafe"
	default:
		return fmt.Sprintf("safe: the target can read every version that may be stored of the %d %s checked", n, plural(n, "resource", "resources"))
	}
}

// WriteJSON prints r as indented JSON.
func WriteJSON(w io.Writer, r *Report) error { return document.WriteJSON(w, r) }

// WriteYAML prints r as YAML, with the field names of the JSON.
func WriteYAML(w io.Writer, r *Report) error { return document.WriteYAML(w, r) }

// storedCell lists the versions that may be stored; "any of" says the
// StorageState allows any version and these are the ones svm sees.
func storedCell(res Resource) string {
	versions := make([]string, len(res.Stored))
	for i, s := range res.Stored {
		versions[i] = s.Version
	}
	cell := versionsCell(res.Group, versions)
	if res.AnyVersion {
		cell = "any of " + cell
	}
	for _, h := range res.UnresolvedHashes {
		cell += " + hash " + h
	}
	return cell
}

func versionsCell(group string, versions []string) string {
	if len(versions) == 0 {
		return "-"
	}
	short := make([]string, len(versions))
	for i, v := range versions {
		short[i] = shortVersion(group, v)
	}
	return oneLine(strings.Join(short, ","))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// oneLine turns any run of whitespace into one space: a tab would split a
// cell and a newline a row.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
