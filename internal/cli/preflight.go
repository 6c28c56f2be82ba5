package cli

import (
	"context"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/svm-project/svm/internal/admission"
	"github.com/svm-project/svm/internal/resources"
)

// preflight is svm migrate --dry-run: it writes nothing, and says for each
// resource which admission webhooks and policies the API server would ask
// about svm's writes, and about writes through the status subresource
// (--through-status), from their rules. Which objects they refuse is
// known only by writing them: a check narrowed by selectors or conditions
// is named as such.
func (o *MigrateOptions) preflight(ctx context.Context) error {
	checks, err := admission.Read(ctx, o.clients.Kube.AdmissionregistrationV1())
	if err != nil {
		return fmt.Errorf("read the admission webhooks and policies: %w", err)
	}
	for _, gvr := range o.resources {
		// The engine's own lookup: a resource it would refuse to migrate
		// is refused here too, and "has a status subresource" means what
		// --through-status acts on.
		info, status, err := o.ops.LookupWithStatus(ctx, gvr)
		if err != nil {
			return err
		}
		writePreflight(o.Out, checks, gvr, info.Namespaced, status)
	}
	return nil
}

// writePreflight says what preflight found for gvr.
func writePreflight(out io.Writer, checks admission.Checks, gvr schema.GroupVersionResource, namespaced, status bool) {
	name := resources.DisplayName(gvr.GroupResource())
	own := checks.Matching(admission.Write{Resource: gvr, Namespaced: namespaced})
	if len(own) == 0 {
		fmt.Fprintf(out, "%s: no admission webhook or policy is asked about svm's writes\n", name)
	} else {
		fmt.Fprintf(out, "%s: admission checks asked about svm's writes, which may refuse them: %d\n", name, len(own))
		for _, c := range own {
			fmt.Fprintf(out, "  %s\n", c)
		}
	}
	if !status {
		if len(own) > 0 {
			fmt.Fprintf(out, "  %s has no status subresource: --through-status cannot write past them\n", name)
		}
		return
	}
	through := checks.Matching(admission.Write{Resource: gvr, Subresource: "status", Namespaced: namespaced})
	if len(through) == 0 {
		fmt.Fprintf(out, "  through the status subresource (--through-status): no admission webhook or policy is asked\n")
		return
	}
	fmt.Fprintf(out, "  admission checks asked about writes through the status subresource (--through-status): %d\n", len(through))
	for _, c := range through {
		fmt.Fprintf(out, "    %s\n", c)
	}
}
