package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	apiserverinternalv1alpha1 "k8s.io/api/apiserverinternal/v1alpha1"
	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	storagemigrationv1beta1 "k8s.io/api/storagemigration/v1beta1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/intree"
	"github.com/svm-project/svm/internal/maybestored"
	"github.com/svm-project/svm/internal/upgrade"
)

// CheckUpgradeOptions are the options of `svm check-upgrade`.
type CheckUpgradeOptions struct {
	ConfigFlags *genericclioptions.ConfigFlags
	// Decodable are --decodable flags, RESOURCE[.GROUP]=VERSION[,VERSION...].
	Decodable []string
	// Files are target files (upgrade.TargetFile).
	Files []string
	// To is --to, a Kubernetes release whose decodable versions of
	// built-in resources come from k8s.io/api.
	To string
	// Output is table, json or yaml.
	Output string

	Out, ErrOut io.Writer

	clusterReader
	target upgrade.Target
	to     *upgrade.Release
}

var (
	checkUpgradeOutputs = []string{"table", "json", "yaml"}

	crdResource                   = apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions")
	storageVersionAPIGroupVersion = apiserverinternalv1alpha1.SchemeGroupVersion
)

func newCheckUpgradeCommand(configFlags *genericclioptions.ConfigFlags, out, errOut io.Writer) *cobra.Command {
	o := &CheckUpgradeOptions{ConfigFlags: configFlags, Out: out, ErrOut: errOut}
	cmd := &cobra.Command{
		Use:   "check-upgrade (--to RELEASE | --decodable RESOURCE[.GROUP]=VERSION[,VERSION...]... | -f FILE)",
		Short: "Check that a target API server can decode every version objects may be stored in",
		Long: "Before an upgrade, a downgrade or removing a CRD version: given the versions the target API\n" +
			"server decodes, tell for each resource named whether objects may be stored in a version the\n" +
			"target cannot decode. What may be stored comes from svm's StorageStates, discovery, CRDs'\n" +
			"status.storedVersions and, where it is served, the StorageVersion API, whose API servers must\n" +
			"agree on the version they write.\n\n" +
			"With --to RELEASE (1.39 or v1.39) the target is that Kubernetes release: every resource the\n" +
			"server stores is checked. A built-in resource is decodable in the versions the release still\n" +
			"serves, as the k8s.io/api svm is built with records them (a prerelease version is not from\n" +
			"the release that removes it; removals decided after that k8s.io/api are not known); a custom\n" +
			"resource in its CRD's versions; an aggregated API's resources are unknown unless given with\n" +
			"--decodable, which wins over --to for the resources it names. An unsafe resource is given the\n" +
			"commands that fix it.\n\n" +
			"A version is VERSION (in the resource's group) or GROUP/VERSION. A file lists them as\n\n" +
			"  version: v1\n" +
			"  decodable:\n" +
			"    widgets.example.com: [v2]\n" +
			"    deployments.apps: [v1]\n\n" +
			"Exit codes: 0 safe, 3 unsafe, 4 unknown (svm cannot tell what is stored, nothing is unsafe),\n" +
			"1 the check could not be made.",
		Example: "  svm check-upgrade --to 1.39\n" +
			"  svm check-upgrade --decodable widgets.example.com=v2 --decodable deployments.apps=v1\n" +
			"  svm check-upgrade -f target.yaml -o json",
		Args: cobra.NoArgs,
		RunE: runOptions(o, func(ctx context.Context) (int, error) {
			verdict, err := o.Run(ctx)
			return ExitCode(verdict), err
		}),
	}
	fs := cmd.Flags()
	fs.StringArrayVar(&o.Decodable, "decodable", nil, "versions the target decodes for a resource, as RESOURCE[.GROUP]=VERSION[,VERSION...] (repeatable)")
	fs.StringVar(&o.To, "to", "", "the Kubernetes release to upgrade to (1.39 or v1.39), whose decodable versions come from k8s.io/api and the CRDs")
	fs.StringArrayVarP(&o.Files, "filename", "f", nil, "file listing the versions the target decodes, by resource (repeatable)")
	fs.StringVarP(&o.Output, "output", "o", "table", "output format: "+strings.Join(checkUpgradeOutputs, ", ")+" (json and yaml have a stable, versioned structure)")
	return cmd
}

// ExitCode is the exit code of `svm check-upgrade` for a verdict.
func ExitCode(v upgrade.Verdict) int {
	switch v {
	case upgrade.VerdictSafe:
		return 0
	case upgrade.VerdictUnsafe:
		return ExitUnsafe
	default:
		return ExitUnknown
	}
}

// Complete reads the target and builds the clients. It sends no request.
func (o *CheckUpgradeOptions) Complete() error {
	o.target = upgrade.Target{}
	o.to = nil
	if o.To != "" {
		r, err := upgrade.ParseRelease(o.To)
		if err != nil {
			return fmt.Errorf("--to: %w", err)
		}
		o.to = &r
	}
	for _, f := range o.Decodable {
		if err := o.target.ParseDecodable(f); err != nil {
			return err
		}
	}
	for _, path := range o.Files {
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read target file: %w", err)
		}
		if err := o.target.ParseFile(data); err != nil {
			return fmt.Errorf("target file %s: %w", path, err)
		}
	}
	return o.connect(o.ConfigFlags)
}

// Validate checks the flags.
func (o *CheckUpgradeOptions) Validate() error {
	if err := validateOutput(o.Output, checkUpgradeOutputs); err != nil {
		return err
	}
	if len(o.target) == 0 && o.to == nil {
		return errors.New("say what the target API server is or decodes: --to RELEASE, --decodable RESOURCE[.GROUP]=VERSION[,VERSION...] or -f FILE")
	}
	return nil
}

// Run reads what may be stored, prints the report and returns its verdict.
func (o *CheckUpgradeOptions) Run(ctx context.Context) (upgrade.Verdict, error) {
	in, err := o.fetch(ctx)
	if err != nil {
		return "", err
	}
	if o.to != nil {
		v, err := o.Discovery.ServerVersion()
		if err != nil {
			return "", fmt.Errorf("read the server's version: %w", err)
		}
		server, err := upgrade.ReleaseFromServer(v.Major, v.Minor)
		if err != nil {
			return "", err
		}
		if err := in.FillFromRelease(*o.to, server); err != nil {
			return "", err
		}
	}
	r := upgrade.Check(*in)
	switch o.Output {
	case "json":
		err = upgrade.WriteJSON(o.Out, r)
	case "yaml":
		err = upgrade.WriteYAML(o.Out, r)
	default:
		err = upgrade.WriteTable(o.Out, r)
	}
	return r.Verdict, err
}

// fetch reads discovery, svm's StorageStates, the CRDs and, where served,
// the StorageVersions. Discovery comes first, so that an unreachable server
// is one plain error. A group whose discovery failed is not an error: the
// resources it holds are judged unknown.
func (o *CheckUpgradeOptions) fetch(ctx context.Context) (*upgrade.Input, error) {
	in := &upgrade.Input{Target: o.target}
	groups, lists, err := o.Discovery.ServerGroupsAndResourcesWithContext(ctx)
	if failed, ok := discovery.GroupDiscoveryFailedErrorGroups(err); ok {
		for gv := range failed {
			in.Discovery.FailedGroupVersions = append(in.Discovery.FailedGroupVersions, gv)
		}
		slices.SortFunc(in.Discovery.FailedGroupVersions, func(a, b schema.GroupVersion) int { return strings.Compare(a.String(), b.String()) })
	} else if err != nil {
		return nil, o.unreachable(err)
	}
	groupList := &metav1.APIGroupList{}
	in.Discovery.GroupVersions = map[string][]string{}
	for _, g := range groups {
		groupList.Groups = append(groupList.Groups, *g)
		for _, v := range g.Versions {
			in.Discovery.GroupVersions[g.Name] = append(in.Discovery.GroupVersions[g.Name], v.Version)
		}
	}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") {
				continue
			}
			in.Discovery.Resources = append(in.Discovery.Resources, upgrade.DiscoveredResource{
				GroupResource: gv.WithResource(r.Name).GroupResource(), Kind: r.Kind, StorageVersionHash: r.StorageVersionHash,
			})
		}
	}

	in.SVMServed = served(groupList, migrationv1alpha1.GroupVersion)
	if in.SVMServed {
		if in.StorageStates, err = listAs[migrationv1alpha1.StorageState](ctx, o.Dynamic, storageStatesResource); err != nil {
			return nil, err
		}
	}
	if served(groupList, apiextensionsv1.SchemeGroupVersion) {
		if in.CRDs, err = listAs[apiextensionsv1.CustomResourceDefinition](ctx, o.Dynamic, crdResource); err != nil {
			return nil, err
		}
	}
	if in.Unrecorded, err = unrecorded(ctx, o.Dynamic, groupList, in); err != nil {
		return nil, err
	}
	in.StorageVersionAPIServed = served(groupList, storageVersionAPIGroupVersion)
	if in.StorageVersionAPIServed {
		list, err := o.Kube.InternalV1alpha1().StorageVersions().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list storageversions.%s: %w", storageVersionAPIGroupVersion.Group, err)
		}
		in.StorageVersions = list.Items
	}
	return in, nil
}

// unrecorded asks maybestored.Unrecorded of every CRD in in, with the
// in-tree migrations read from storagemigration.k8s.io/v1 (or v1beta1,
// where v1 is not served): the custom resources whose storedVersions a
// failed in-tree migration may have left short.
func unrecorded(ctx context.Context, dyn dynamic.Interface, groups *metav1.APIGroupList, in *upgrade.Input) (map[schema.GroupResource]string, error) {
	var inTree []storagemigrationv1.StorageVersionMigration
	var err error
	switch {
	case len(in.CRDs) == 0:
		return nil, nil
	case served(groups, storagemigrationv1.SchemeGroupVersion):
		inTree, err = listAs[storagemigrationv1.StorageVersionMigration](ctx, dyn, storagemigrationv1.SchemeGroupVersion.WithResource("storageversionmigrations"))
	case served(groups, storagemigrationv1beta1.SchemeGroupVersion):
		var beta []storagemigrationv1beta1.StorageVersionMigration
		beta, err = listAs[storagemigrationv1beta1.StorageVersionMigration](ctx, dyn, storagemigrationv1beta1.SchemeGroupVersion.WithResource("storageversionmigrations"))
		for i := range beta {
			inTree = append(inTree, intree.FromBeta(&beta[i]))
		}
	}
	if err != nil || len(inTree) == 0 {
		return nil, err
	}
	out := map[schema.GroupResource]string{}
	for i := range in.CRDs {
		crd := &in.CRDs[i]
		gr := schema.GroupResource{Group: crd.Spec.Group, Resource: crd.Spec.Names.Plural}
		e := maybestored.Evidence{Group: gr.Group, Kind: crd.Spec.Names.Kind, CRD: crd}
		for j := range in.StorageStates {
			if s := &in.StorageStates[j]; s.Spec.Resource.Group == gr.Group && s.Spec.Resource.Resource == gr.Resource {
				e.State = s
			}
		}
		for _, m := range inTree {
			if m.Spec.Resource.Group == gr.Group && m.Spec.Resource.Resource == gr.Resource {
				e.InTree = append(e.InTree, m)
			}
		}
		if why := maybestored.Unrecorded(e); why != "" {
			out[gr] = why
		}
	}
	return out, nil
}
