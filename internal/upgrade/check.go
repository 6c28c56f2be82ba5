package upgrade

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	apiserverinternalv1alpha1 "k8s.io/api/apiserverinternal/v1alpha1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
)

// Version identifies the shape of Report. Fields may be added under the
// same version; a field that is removed, renamed or changes meaning makes a
// new version, so a script can check it before trusting the rest.
const Version = "v1"

// Verdict is what Check concludes about a resource, or about all of them.
type Verdict string

const (
	// VerdictSafe: every version that may be stored is one the target
	// decodes.
	VerdictSafe Verdict = "safe"
	// VerdictUnsafe: something may be stored in a version the target
	// cannot decode, or the API servers disagree on the version they
	// write.
	VerdictUnsafe Verdict = "unsafe"
	// VerdictUnknown: svm cannot tell what is stored (no record, or a
	// record it cannot map to a version), and nothing found is unsafe.
	VerdictUnknown Verdict = "unknown"
)

// Source names the record that says a version may be stored.
type Source string

const (
	// SourceStorageState: a hash in svm's StorageState
	// (persistedStorageVersionHashes or currentStorageVersionHash).
	SourceStorageState Source = "storageState"
	// SourceStorageStateUnknown: the StorageState lists "Unknown" (or was
	// never written), so any version may be stored; this is one the
	// resource has, as far as svm can see.
	SourceStorageStateUnknown Source = "storageStateUnknown"
	// SourceDiscovery: discovery's storageVersionHash, the version the API
	// server writes now.
	SourceDiscovery Source = "discovery"
	// SourceCRDStoredVersions: the CRD's status.storedVersions.
	SourceCRDStoredVersions Source = "crdStoredVersions"
	// SourceStorageVersionAPI: the encodingVersion an API server reports
	// in the StorageVersion API.
	SourceStorageVersionAPI Source = "storageVersionAPI"
	// SourceFailedInTreeMigration: an in-tree migration of a custom
	// resource failed after kube-controller-manager cut its CRD's
	// storedVersions (Input.Unrecorded), so any version may be stored;
	// this is one the resource has, as far as svm can see.
	SourceFailedInTreeMigration Source = "failedInTreeMigration"
)

// sourceText is how the table names sources.
var sourceText = map[Source]string{
	SourceStorageState:          "StorageState",
	SourceStorageStateUnknown:   "StorageState Unknown",
	SourceDiscovery:             "discovery",
	SourceCRDStoredVersions:     "CRD storedVersions",
	SourceStorageVersionAPI:     "StorageVersion API",
	SourceFailedInTreeMigration: "failed in-tree migration",
}

// Report is what `svm check-upgrade` shows, and the document printed by
// `svm check-upgrade -o json`.
type Report struct {
	// Version is the Version of this structure.
	Version string `json:"version"`
	// Verdict is the worst verdict of Resources: unsafe if any resource
	// is, else unknown if any is, else safe.
	Verdict Verdict `json:"verdict"`
	// SVMAPIServed says whether svm's StorageStates could be read (its
	// CRDs are installed).
	SVMAPIServed bool `json:"svmAPIServed"`
	// StorageVersionAPIServed says whether the server serves
	// internal.apiserver.k8s.io/v1alpha1; without it, agreement between
	// API servers was not checked.
	StorageVersionAPIServed bool `json:"storageVersionAPIServed"`
	// Resources are the resources the target names, by name.
	Resources []Resource `json:"resources"`
	// NotChecked are the resources svm knows of (StorageStates, CRDs,
	// StorageVersions) that the target does not name: with no decodable
	// versions given they cannot be judged.
	NotChecked []string `json:"notChecked"`
	// Release is set when the target is a Kubernetes release
	// (check-upgrade --to): what it decodes came from k8s.io/api.
	Release *ReleaseTarget `json:"release,omitempty"`
}

// ReleaseTarget says what a check against a Kubernetes release rests on.
type ReleaseTarget struct {
	// To is the release checked against, such as 1.39.
	To string `json:"to"`
	// Server is the release the API server reports.
	Server string `json:"server"`
	// KnownThrough is the last release whose removals svm knows (that of
	// the k8s.io/api it is built with).
	KnownThrough string `json:"knownThrough"`
	// Limits say what the check cannot know.
	Limits []string `json:"limits"`
}

// Resource is the verdict on one resource and what it rests on.
type Resource struct {
	// Name is "<resource>.<group>", or "<resource>" for the core group.
	Name     string  `json:"name"`
	Group    string  `json:"group,omitempty"`
	Resource string  `json:"resource"`
	Verdict  Verdict `json:"verdict"`
	// Reasons explain the verdict, the deciding ones first.
	Reasons []string `json:"reasons"`
	// Stored are the versions objects may be stored in, as group/version
	// ("v1" for the core group), each with the records that say so.
	Stored []StoredVersion `json:"stored"`
	// AnyVersion: the StorageState (or a failed in-tree migration,
	// Input.Unrecorded) says any version may be stored; Stored then also
	// holds every version svm sees for the resource.
	AnyVersion bool `json:"anyVersion"`
	// UnresolvedHashes are recorded hashes that match no version svm
	// tried: objects may be in a version svm cannot name.
	UnresolvedHashes []string `json:"unresolvedHashes,omitempty"`
	// TargetDecodes are the versions the target decodes, as given.
	TargetDecodes []string `json:"targetDecodes"`
	// NotDecodable are the versions of Stored the target cannot decode.
	NotDecodable []string `json:"notDecodable"`
	// Fix are the commands that make an unsafe resource safe, when some
	// do: the server writes a version the target decodes, so retiring
	// each version it cannot decode rewrites the objects stored in it,
	// moves the managedFields entries naming it and prunes a CRD's
	// storedVersions.
	Fix []string `json:"fix,omitempty"`
	// APIServers are the API servers' reports in the StorageVersion API.
	APIServers []APIServer `json:"apiServers,omitempty"`
	// ServersDisagree: the API servers report different encoding versions
	// (commonEncodingVersion is unset), as during a rolling upgrade.
	ServersDisagree bool `json:"serversDisagree"`
}

// StoredVersion is a version objects may be stored in.
type StoredVersion struct {
	Version string   `json:"version"`
	Sources []Source `json:"sources"`
}

// APIServer is one API server's entry in a StorageVersion.
type APIServer struct {
	ID                string   `json:"id"`
	EncodingVersion   string   `json:"encodingVersion"`
	DecodableVersions []string `json:"decodableVersions"`
}

// Input is what Check needs: the target, and the objects as read.
type Input struct {
	// Target names the resources to check and what the target decodes.
	Target Target
	// Discovery is what the server's discovery documents say.
	Discovery Discovery
	// SVMServed says whether svm's API is served; StorageStates are
	// ignored when it is not.
	SVMServed     bool
	StorageStates []migrationv1alpha1.StorageState
	CRDs          []apiextensionsv1.CustomResourceDefinition
	// StorageVersionAPIServed says whether internal.apiserver.k8s.io/v1alpha1
	// is served; StorageVersions are ignored when it is not.
	StorageVersionAPIServed bool
	StorageVersions         []apiserverinternalv1alpha1.StorageVersion
	// Unrecorded are custom resources whose storedVersions may miss a
	// version objects are stored in (maybestored.Unrecorded), with why:
	// any version they have may be stored.
	Unrecorded map[schema.GroupResource]string
	// TargetUnknown are resources whose decodable versions the target
	// does not say (an aggregated API's, for a Kubernetes release), with
	// why: they are judged unknown, or unsafe when their API servers
	// disagree.
	TargetUnknown map[schema.GroupResource]string
	// Release, if set, is the Kubernetes release Target was filled from
	// (see FillFromRelease); it is passed on to the report.
	Release *ReleaseTarget
}

// Discovery is what the per-group-version discovery documents say.
type Discovery struct {
	// Resources are the resources served, once each.
	Resources []DiscoveredResource
	// GroupVersions are the versions each group serves.
	GroupVersions map[string][]string
	// FailedGroupVersions could not be read: what they would have said is
	// unknown.
	FailedGroupVersions []schema.GroupVersion
}

// DiscoveredResource is a served resource.
type DiscoveredResource struct {
	schema.GroupResource
	Kind string
	// StorageVersionHash is discovery's hash of the version written now,
	// or "" when the server reports none.
	StorageVersionHash string
}

// records are the objects of Input, by resource.
type records struct {
	in              *Input
	discovered      map[schema.GroupResource]DiscoveredResource
	states          map[schema.GroupResource]*migrationv1alpha1.StorageState
	crds            map[schema.GroupResource]*apiextensionsv1.CustomResourceDefinition
	storageVersions map[schema.GroupResource]*apiserverinternalv1alpha1.StorageVersion
}

func index(in *Input) *records {
	rec := &records{
		in:              in,
		discovered:      map[schema.GroupResource]DiscoveredResource{},
		states:          map[schema.GroupResource]*migrationv1alpha1.StorageState{},
		crds:            map[schema.GroupResource]*apiextensionsv1.CustomResourceDefinition{},
		storageVersions: map[schema.GroupResource]*apiserverinternalv1alpha1.StorageVersion{},
	}
	for _, d := range in.Discovery.Resources {
		if _, ok := rec.discovered[d.GroupResource]; !ok {
			rec.discovered[d.GroupResource] = d
		}
	}
	if in.SVMServed {
		for i := range in.StorageStates {
			s := &in.StorageStates[i]
			rec.states[schema.GroupResource{Group: s.Spec.Resource.Group, Resource: s.Spec.Resource.Resource}] = s
		}
	}
	for i := range in.CRDs {
		c := &in.CRDs[i]
		rec.crds[schema.GroupResource{Group: c.Spec.Group, Resource: c.Spec.Names.Plural}] = c
	}
	if in.StorageVersionAPIServed {
		for i := range in.StorageVersions {
			sv := &in.StorageVersions[i]
			if gr, ok := StorageVersionResource(sv.Name); ok {
				rec.storageVersions[gr] = sv
			}
		}
	}
	return rec
}

// StorageVersionResource is the resource a StorageVersion object is about.
// API servers name them "<group>.<resource>", with "core" for the core
// group (a group name must be a DNS subdomain); a resource has no dots.
func StorageVersionResource(name string) (schema.GroupResource, bool) {
	i := strings.LastIndexByte(name, '.')
	if i <= 0 || i == len(name)-1 {
		return schema.GroupResource{}, false
	}
	gr := schema.GroupResource{Group: name[:i], Resource: name[i+1:]}
	if gr.Group == "core" {
		gr.Group = ""
	}
	return gr, true
}

// Check judges every resource the target names.
func Check(in Input) *Report {
	rec := index(&in)
	r := &Report{
		Version: Version, Verdict: VerdictSafe,
		SVMAPIServed: in.SVMServed, StorageVersionAPIServed: in.StorageVersionAPIServed,
		// Empty, not nil: scripts get [] rather than null.
		Resources: []Resource{}, NotChecked: []string{}, Release: in.Release,
	}
	for gr, decodes := range in.Target {
		res := rec.check(gr, decodes, "")
		r.Resources = append(r.Resources, res)
		r.Verdict = worse(r.Verdict, res.Verdict)
	}
	for gr, why := range in.TargetUnknown {
		if _, given := in.Target[gr]; given {
			continue
		}
		res := rec.check(gr, nil, why)
		r.Resources = append(r.Resources, res)
		r.Verdict = worse(r.Verdict, res.Verdict)
	}
	slices.SortFunc(r.Resources, func(a, b Resource) int { return cmp.Compare(a.Name, b.Name) })

	known := map[string]bool{}
	for gr := range rec.states {
		known[resourceName(gr)] = true
	}
	for gr := range rec.crds {
		known[resourceName(gr)] = true
	}
	for gr := range rec.storageVersions {
		known[resourceName(gr)] = true
	}
	for gr := range in.Target {
		delete(known, resourceName(gr))
	}
	for gr := range in.TargetUnknown {
		delete(known, resourceName(gr))
	}
	for name := range known {
		r.NotChecked = append(r.NotChecked, name)
	}
	slices.Sort(r.NotChecked)
	return r
}

func worse(a, b Verdict) Verdict {
	rank := map[Verdict]int{VerdictSafe: 0, VerdictUnknown: 1, VerdictUnsafe: 2}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

func resourceName(gr schema.GroupResource) string {
	return migrationv1alpha1.StorageStateName(migrationv1alpha1.GroupResource{Group: gr.Group, Resource: gr.Resource})
}

// storedSet collects the versions that may be stored and who says so.
type storedSet map[schema.GroupVersion]map[Source]bool

func (s storedSet) add(gv schema.GroupVersion, src Source) {
	if s[gv] == nil {
		s[gv] = map[Source]bool{}
	}
	s[gv][src] = true
}

// check judges gr against the versions the target decodes, or, when
// targetUnknown says why those are not known, only as far as what is
// stored can be told.
func (rec *records) check(gr schema.GroupResource, decodes []schema.GroupVersion, targetUnknown string) Resource {
	f := rec.facts(gr)
	res := Resource{Name: resourceName(gr), Group: gr.Group, Resource: gr.Resource, TargetDecodes: gvStrings(decodes), NotDecodable: []string{}}
	seen := f.seen(rec.in.Discovery.GroupVersions[gr.Group])
	stored, notes := f.stored(&res, seen, decodes)
	unknown := rec.unknowns(f, &res, seen)
	if targetUnknown != "" {
		// Nothing is judged undecodable; the verdict is unknown at best.
		for gv := range stored {
			decodes = append(decodes, gv)
		}
		unknown = append([]string{targetUnknown}, unknown...)
	}
	judge(&res, stored, decodes, unknown, notes)
	if res.Verdict == VerdictUnsafe && len(res.NotDecodable) > 0 && !res.ServersDisagree {
		res.Fix, res.Reasons = fix(res, stored, decodes)
	}
	return res
}

// fix are the commands that make res safe, and its reasons with how: when
// the server writes a version the target decodes, retiring each version
// the target cannot decode (svm retire) rewrites the objects stored in it,
// moves the managedFields entries naming it, which server-side apply
// would trip on once it is removed, and prunes a CRD's storedVersions;
// when the server writes one the target cannot decode, no rewrite helps
// before the cluster runs a release that writes another. While API
// servers disagree nothing is offered: svm migrates once they agree.
func fix(res Resource, stored storedSet, decodes []schema.GroupVersion) ([]string, []string) {
	for gv, sources := range stored {
		if !sources[SourceDiscovery] {
			continue
		}
		current := shortVersion(res.Group, gv.String())
		if !slices.Contains(decodes, gv) {
			return nil, append(res.Reasons, "the API server itself writes "+current+
				", which the target cannot decode: no migration helps until the cluster runs a release that writes a version the target decodes")
		}
		var cmds []string
		for _, v := range res.NotDecodable {
			retired := parseGV(v)
			if retired.Group != res.Group {
				cmds = append(cmds, "svm migrate "+res.Name)
				continue
			}
			name := res.Resource + "." + retired.Version
			if res.Group != "" {
				name += "." + res.Group
			}
			cmds = append(cmds, "svm retire "+name)
		}
		cmds = slices.Compact(cmds)
		return cmds, append(res.Reasons, "the API server writes "+current+", which the target decodes: `"+
			strings.Join(cmds, "`, `")+"` moves every object there")
	}
	return nil, res.Reasons
}

// facts are the records about one resource.
type facts struct {
	gr     schema.GroupResource
	disc   DiscoveredResource
	served bool
	state  *migrationv1alpha1.StorageState
	crd    *apiextensionsv1.CustomResourceDefinition
	sv     *apiserverinternalv1alpha1.StorageVersion
	// kind is the resource's kind, which its hashes are computed over;
	// "" when neither discovery nor a CRD names it.
	kind string
	// unrecorded is Input.Unrecorded's word on it.
	unrecorded string
}

func (rec *records) facts(gr schema.GroupResource) *facts {
	f := &facts{gr: gr, state: rec.states[gr], crd: rec.crds[gr], sv: rec.storageVersions[gr], unrecorded: rec.in.Unrecorded[gr]}
	f.disc, f.served = rec.discovered[gr]
	f.kind = f.disc.Kind
	if f.kind == "" && f.crd != nil {
		f.kind = f.crd.Spec.Names.Kind
	}
	return f
}

// seen are the versions svm sees the resource have: those its group
// serves, its CRD's, and those the API servers decode. They are what "any
// version" means, and the first candidates for mapping hashes back.
func (f *facts) seen(groupVersions []string) []schema.GroupVersion {
	var seen []schema.GroupVersion
	see := func(gv schema.GroupVersion) {
		if gv.Version != "" && !slices.Contains(seen, gv) {
			seen = append(seen, gv)
		}
	}
	if f.served {
		for _, v := range groupVersions {
			see(schema.GroupVersion{Group: f.gr.Group, Version: v})
		}
	}
	if f.crd != nil {
		for _, v := range f.crd.Spec.Versions {
			see(schema.GroupVersion{Group: f.crd.Spec.Group, Version: v.Name})
		}
		for _, v := range f.crd.Status.StoredVersions {
			see(schema.GroupVersion{Group: f.crd.Spec.Group, Version: v})
		}
	}
	if f.sv != nil {
		for _, s := range f.sv.Status.StorageVersions {
			see(parseGV(s.EncodingVersion))
			for _, v := range s.DecodableVersions {
				see(parseGV(v))
			}
		}
	}
	return seen
}

// stateDisagreement is what the StorageState says of API servers that
// may store the resource in different versions, "" when it says nothing.
// A StorageVersion object, read now, says it better than svm's record of
// its last look (svm may have stopped since).
func (f *facts) stateDisagreement() string {
	if f.state == nil || f.sv != nil {
		return ""
	}
	return f.state.Status.ServersDisagree
}

// stored joins every record of what may be stored. It fills in res what
// the records say beyond versions: Unknown, unresolved hashes, the API
// servers and whether they disagree.
func (f *facts) stored(res *Resource, seen, decodes []schema.GroupVersion) (stored storedSet, notes []string) {
	stored = storedSet{}
	hashes := newHashIndex(f.kind, f.gr.Group, append(slices.Clone(seen), decodes...))
	resolve := func(hash string, src Source) {
		if gv, ok := hashes.resolve(hash); ok {
			stored.add(gv, src)
		} else if !slices.Contains(res.UnresolvedHashes, hash) {
			res.UnresolvedHashes = append(res.UnresolvedHashes, hash)
		}
	}
	if f.state != nil {
		st := f.state.Status
		// A status never written counts as Unknown, as the trigger treats
		// it; an Unknown current hash means the servers disagreed when svm
		// last looked.
		res.AnyVersion = len(st.PersistedStorageVersionHashes) == 0 ||
			slices.Contains(st.PersistedStorageVersionHashes, migrationv1alpha1.UnknownStorageVersionHash) ||
			st.CurrentStorageVersionHash == migrationv1alpha1.UnknownStorageVersionHash
		for _, h := range st.PersistedStorageVersionHashes {
			if h != migrationv1alpha1.UnknownStorageVersionHash {
				resolve(h, SourceStorageState)
			}
		}
		if h := st.CurrentStorageVersionHash; h != "" && h != migrationv1alpha1.UnknownStorageVersionHash {
			resolve(h, SourceStorageState)
			if f.served && f.disc.StorageVersionHash != "" && f.disc.StorageVersionHash != h {
				notes = append(notes, "svm has not recorded the current storage version yet (is its controller running?)")
			}
		}
	}
	if f.served && f.disc.StorageVersionHash != "" {
		resolve(f.disc.StorageVersionHash, SourceDiscovery)
	}
	if f.crd != nil {
		for _, v := range f.crd.Status.StoredVersions {
			stored.add(schema.GroupVersion{Group: f.crd.Spec.Group, Version: v}, SourceCRDStoredVersions)
		}
	}
	if f.sv != nil {
		encodings := map[string][]string{}
		for _, s := range f.sv.Status.StorageVersions {
			stored.add(parseGV(s.EncodingVersion), SourceStorageVersionAPI)
			encodings[s.EncodingVersion] = append(encodings[s.EncodingVersion], s.APIServerID)
			res.APIServers = append(res.APIServers, APIServer{ID: s.APIServerID, EncodingVersion: s.EncodingVersion, DecodableVersions: append([]string{}, s.DecodableVersions...)})
		}
		slices.SortFunc(res.APIServers, func(a, b APIServer) int { return cmp.Compare(a.ID, b.ID) })
		// The API server unsets commonEncodingVersion exactly when the
		// servers' encoding versions differ; read it, but also compare them,
		// so a stale common version cannot hide a disagreement.
		res.ServersDisagree = len(encodings) > 1 || len(encodings) == 1 && f.sv.Status.CommonEncodingVersion == nil
		if res.ServersDisagree {
			res.Reasons = append(res.Reasons, disagreement(f.gr.Group, encodings))
		}
	}
	if d := f.stateDisagreement(); d != "" && !res.ServersDisagree {
		// Without the StorageVersion API, svm's trigger read each API
		// server's discovery and found them apart (or could not read
		// them all): no retirement is safe until they agree.
		res.ServersDisagree = true
		res.Reasons = append(res.Reasons, "API servers may write different versions (svm's StorageState): "+d)
	}
	if res.AnyVersion {
		for _, gv := range seen {
			stored.add(gv, SourceStorageStateUnknown)
		}
	}
	if why := f.unrecorded; why != "" {
		res.AnyVersion = true
		notes = append(notes, why)
		for _, gv := range seen {
			stored.add(gv, SourceFailedInTreeMigration)
		}
	}
	if f.state == nil && f.crd != nil {
		notes = append(notes, "no StorageState; the CRD's status.storedVersions, kept by the API server, says what may be stored")
	}
	return stored, notes
}

// unknowns are what svm cannot know about the resource.
func (rec *records) unknowns(f *facts, res *Resource, seen []schema.GroupVersion) []string {
	var unknown []string
	switch {
	case !f.served && f.state == nil && f.crd == nil && f.sv == nil:
		unknown = append(unknown, "svm knows nothing of this resource: it is not served and has no StorageState, CRD or StorageVersion (is the name right?)")
	case f.state == nil && f.crd == nil:
		why := "no StorageState: svm has not recorded which versions were stored before"
		if !rec.in.SVMServed {
			why = "no StorageState (svm's CRDs are not installed): svm cannot tell which versions were stored before"
		}
		unknown = append(unknown, why)
	}
	if len(res.UnresolvedHashes) > 0 {
		what := "of " + f.kind
		if f.kind == "" {
			what = "(the resource is not served, so its kind is unknown)"
		}
		unknown = append(unknown, fmt.Sprintf("recorded hash %s matches no version %s svm can see: objects may be in a version svm cannot name",
			strings.Join(res.UnresolvedHashes, ", "), what))
	}
	if res.AnyVersion && len(seen) == 0 {
		unknown = append(unknown, "the StorageState lists Unknown and svm sees no version of the resource")
	}
	for _, gv := range rec.in.Discovery.FailedGroupVersions {
		if gv.Group == f.gr.Group {
			unknown = append(unknown, fmt.Sprintf("discovery of %s failed: the version the server writes now may be missing", gv))
		}
	}
	return unknown
}

// judge sets the verdict: unsafe when a version that may be stored is not
// decodable or the servers disagree (already a reason), else unknown when
// svm cannot know, else safe. The deciding reasons come first.
func judge(res *Resource, stored storedSet, decodes []schema.GroupVersion, unknown, notes []string) {
	versions := make([]schema.GroupVersion, 0, len(stored))
	for gv := range stored {
		versions = append(versions, gv)
	}
	slices.SortFunc(versions, func(a, b schema.GroupVersion) int { return compareVersions(res.Group, a, b) })
	res.Stored = []StoredVersion{}
	var notDecodable []string
	for _, gv := range versions {
		entry := StoredVersion{Version: gv.String()}
		for src := range stored[gv] {
			entry.Sources = append(entry.Sources, src)
		}
		slices.Sort(entry.Sources)
		res.Stored = append(res.Stored, entry)
		if !slices.Contains(decodes, gv) {
			res.NotDecodable = append(res.NotDecodable, gv.String())
			notDecodable = append(notDecodable, shortVersion(res.Group, gv.String())+" ("+sourcesText(entry.Sources)+")")
		}
	}
	if len(res.Stored) == 0 && len(unknown) == 0 {
		unknown = append(unknown, "svm finds no record of the versions stored")
	}
	if len(notDecodable) > 0 {
		res.Reasons = append([]string{"the target cannot decode " + strings.Join(notDecodable, ", ")}, res.Reasons...)
	}
	switch {
	case len(notDecodable) > 0 || res.ServersDisagree:
		res.Verdict = VerdictUnsafe
	case len(unknown) > 0:
		res.Verdict = VerdictUnknown
	default:
		res.Verdict = VerdictSafe
		res.Reasons = append(res.Reasons, safeReason(res.Group, *res))
	}
	res.Reasons = append(append(res.Reasons, unknown...), notes...)
}

func safeReason(group string, res Resource) string {
	versions := make([]string, len(res.Stored))
	for i, s := range res.Stored {
		versions[i] = shortVersion(group, s.Version)
	}
	switch {
	case res.AnyVersion:
		why := "the StorageState lists Unknown"
		if !slices.ContainsFunc(res.Stored, func(s StoredVersion) bool { return slices.Contains(s.Sources, SourceStorageStateUnknown) }) {
			why = "an in-tree migration failed after storedVersions were cut"
		}
		return why + ", so any version may be stored; the target decodes every version svm sees for the resource: " + strings.Join(versions, ", ")
	case len(versions) == 1:
		return "only " + versions[0] + " may be stored, and the target decodes it"
	default:
		return strings.Join(versions, ", ") + " may be stored, and the target decodes them all"
	}
}

func disagreement(group string, encodings map[string][]string) string {
	versions := make([]string, 0, len(encodings))
	for v := range encodings {
		versions = append(versions, v)
	}
	slices.SortFunc(versions, func(a, b string) int { return compareVersions(group, parseGV(a), parseGV(b)) })
	parts := make([]string, len(versions))
	for i, v := range versions {
		ids := slices.Sorted(slices.Values(encodings[v]))
		parts[i] = shortVersion(group, v) + " by " + strings.Join(ids, ", ")
	}
	if len(versions) < 2 {
		return "the API servers have not agreed on an encoding version (" + strings.Join(parts, "; ") + "): unsafe while an upgrade is under way"
	}
	return "API servers write different versions (" + strings.Join(parts, "; ") + "): unsafe while the upgrade is under way, until they agree and svm has migrated"
}

func sourcesText(sources []Source) string {
	out := make([]string, len(sources))
	for i, s := range sources {
		out[i] = cmp.Or(sourceText[s], string(s))
	}
	return strings.Join(out, ", ")
}

// parseGV reads the StorageVersion API's "group/version", or "v1" for the
// core group.
func parseGV(s string) schema.GroupVersion {
	if g, v, ok := strings.Cut(s, "/"); ok {
		return schema.GroupVersion{Group: g, Version: v}
	}
	return schema.GroupVersion{Version: s}
}

func gvStrings(gvs []schema.GroupVersion) []string {
	out := make([]string, len(gvs))
	for i, gv := range gvs {
		out[i] = gv.String()
	}
	return out
}

// shortVersion drops the group from a version in the resource's own group:
// "v2" for example.com/v2 of widgets.example.com.
func shortVersion(group, gv string) string {
	if g, v, ok := strings.Cut(gv, "/"); ok && g == group {
		return v
	}
	return gv
}
