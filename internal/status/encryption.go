package status

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/rotation"
)

// Encryption is where encryption at rest stands: the configuration every
// API server has loaded, the resources whose objects svm re-encrypts and
// whether each was rewritten under it, and what that means for the keys.
type Encryption struct {
	// Servers are the API servers known from their identity leases or
	// their metrics, by name (ID, else Endpoint, else IDHash). A server
	// that has no encryption configuration and does not name itself in
	// its metrics is known by its Endpoint alone.
	Servers []EncryptionServer `json:"servers"`
	// Agreed is true when every API server was read and all have loaded
	// the same configuration (or all none).
	Agreed bool `json:"agreed"`
	// ConfigHash is that configuration, empty when they agree on none.
	ConfigHash string `json:"configHash,omitempty"`
	// KMSKeys are, per KMS v2 provider, the key every server is seen
	// writing under, when they agree.
	KMSKeys []migrationv1alpha1.KMSKey `json:"kmsKeys,omitempty"`
	// Since is when the last of them loaded it; with KMSKeys, the later
	// of that and the newest Status call to a plugin that named its key.
	Since *metav1.Time `json:"since,omitempty"`
	// Waiting says, when they do not agree, why not.
	Waiting string `json:"waiting,omitempty"`
	// Error says why the API servers could not all be known or read: the
	// servers reached are then taken to be all.
	Error string `json:"error,omitempty"`
	// Resources are the StorageStates that record a re-encryption
	// (status.encryption), by name.
	Resources []EncryptedResource `json:"resources"`
	// AllRewritten is true when every API server has loaded the same
	// configuration, at least one resource records a re-encryption, and
	// every one was rewritten under that configuration: the keys it only
	// reads with are no longer needed for any object written through the
	// API. False whenever svm cannot tell.
	AllRewritten bool `json:"allRewritten"`
	// Verdict says in words what the rest means for the keys.
	Verdict string `json:"verdict"`
}

// EncryptionServer is one API server and the configuration it has loaded.
type EncryptionServer struct {
	// IDHash is how its metrics name it (apiserver_id_hash).
	IDHash string `json:"idHash"`
	// ID is its apiServerID, the name of its identity lease; empty when
	// only its metrics were read.
	ID string `json:"id,omitempty"`
	// Endpoint is where its metrics were read; empty when they were not.
	Endpoint string `json:"endpoint,omitempty"`
	// ConfigHash is the encryption configuration it has loaded; empty for
	// none, or when it was not reached.
	ConfigHash string `json:"configHash,omitempty"`
	// LoadedAt is when it loaded that configuration.
	LoadedAt *metav1.Time `json:"loadedAt,omitempty"`
	// ReloadFailedAt is when a later reload of its configuration file
	// failed: it still uses ConfigHash, and the file on disk is not what
	// it uses.
	ReloadFailedAt *metav1.Time `json:"reloadFailedAt,omitempty"`
	// KMSKeys are, per KMS v2 provider, the key its plugin last answered.
	KMSKeys []migrationv1alpha1.KMSKey `json:"kmsKeys,omitempty"`
	// Reached says whether its metrics were read.
	Reached bool `json:"reached"`
}

// EncryptedResource is one resource whose StorageState records a
// re-encryption (status.encryption).
type EncryptedResource struct {
	Name     string `json:"name"`
	Group    string `json:"group,omitempty"`
	Resource string `json:"resource"`
	// ConfigHash is the configuration every API server had loaded at svm
	// controller's last look, as the StorageState records it; empty while
	// they disagreed.
	ConfigHash string `json:"configHash,omitempty"`
	// KMSKeys are the KMS v2 keys recorded with ConfigHash.
	KMSKeys []migrationv1alpha1.KMSKey `json:"kmsKeys,omitempty"`
	// RewrittenConfigHash, RewrittenKMSKeys, RewrittenTime and
	// RewrittenBy are the configuration and KMS v2 keys the last
	// completed re-encryption ran under, when it ended and the migration
	// that did it.
	RewrittenConfigHash string                     `json:"rewrittenConfigHash,omitempty"`
	RewrittenKMSKeys    []migrationv1alpha1.KMSKey `json:"rewrittenKMSKeys,omitempty"`
	RewrittenTime       *metav1.Time               `json:"rewrittenTime,omitempty"`
	RewrittenBy         string                     `json:"rewrittenBy,omitempty"`
	// Current is true when RewrittenConfigHash is the configuration every
	// API server has loaded now (rotation.Current against the servers as
	// read, not as the StorageState last saw them).
	Current bool `json:"current"`
	// Message is the StorageState's, in full.
	Message string `json:"message,omitempty"`
}

// buildEncryption is the encryption section of in, or nil when there is
// nothing to show: no API server reported a configuration and no
// StorageState records a re-encryption.
func buildEncryption(in Input) *Encryption {
	a := in.Encryption
	resources := []EncryptedResource{}
	if in.SVMServed {
		for i := range in.StorageStates {
			if s := &in.StorageStates[i]; s.Status.Encryption != nil {
				resources = append(resources, encryptedResource(s, a))
			}
		}
	}
	if len(resources) == 0 && !configLoaded(a) {
		return nil
	}
	slices.SortFunc(resources, func(x, y EncryptedResource) int { return cmp.Compare(x.Name, y.Name) })
	e := &Encryption{Servers: []EncryptionServer{}, Resources: resources, Error: in.EncryptionError}
	if a != nil {
		for _, s := range a.Servers {
			e.Servers = append(e.Servers, EncryptionServer{
				IDHash: s.IDHash, ID: s.ID, Endpoint: s.Endpoint, ConfigHash: s.ConfigHash,
				LoadedAt: timePtr(s.LoadedAt), ReloadFailedAt: timePtr(s.ReloadFailedAt), Reached: s.Reached,
				KMSKeys: serverKMSKeys(s),
			})
		}
		slices.SortStableFunc(e.Servers, func(x, y EncryptionServer) int { return cmp.Compare(serverName(x), serverName(y)) })
		e.Agreed, e.ConfigHash, e.Since, e.Waiting = a.Agreed, a.ConfigHash, timePtr(a.Since), a.Waiting
		e.KMSKeys = slices.Clone(a.KMSKeys)
	}
	e.Verdict, e.AllRewritten = verdict(e, a != nil)
	return e
}

// configLoaded reports whether any API server reported an encryption
// configuration.
func configLoaded(a *rotation.Agreement) bool {
	return a != nil && slices.ContainsFunc(a.Servers, func(s rotation.Server) bool { return s.ConfigHash != "" })
}

func encryptedResource(s *migrationv1alpha1.StorageState, a *rotation.Agreement) EncryptedResource {
	e := s.Status.Encryption
	row := EncryptedResource{
		Name: s.Name, Group: s.Spec.Resource.Group, Resource: s.Spec.Resource.Resource,
		ConfigHash: e.ConfigHash, RewrittenConfigHash: e.RewrittenConfigHash, RewrittenBy: e.RewrittenBy,
		KMSKeys: slices.Clone(e.KMSKeys), RewrittenKMSKeys: slices.Clone(e.RewrittenKMSKeys),
		Message: e.Message,
	}
	if e.RewrittenTime != nil && !e.RewrittenTime.IsZero() {
		row.RewrittenTime = e.RewrittenTime.DeepCopy()
	}
	row.Current = a != nil && rotation.Current(*a, e)
	return row
}

// serverKMSKeys is the key each KMS v2 provider's plugin last answered
// s, by provider; nil for none.
func serverKMSKeys(s rotation.Server) []migrationv1alpha1.KMSKey {
	var out []migrationv1alpha1.KMSKey
	for _, k := range s.KMS {
		out = append(out, migrationv1alpha1.KMSKey{Provider: k.Provider, KeyIDHash: k.KeyIDHash})
	}
	return out
}

// timePtr keeps t to the second, as the API and the JSON keep times,
// so that the report reads back as built; nil for the zero time.
func timePtr(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	mt := metav1.NewTime(t.Truncate(time.Second))
	return &mt
}

// verdict says what e means for the keys, and whether every resource was
// rewritten under the configuration every API server has loaded. read
// says whether the API servers were read at all.
//
// Each sentence claims only what e shows. "Every API server" is the
// servers known from their identity leases; without the leases it is the
// servers reached, and the verdict says so before it lets go of a key.
func verdict(e *Encryption, read bool) (string, bool) {
	var names, behind []string
	for _, r := range e.Resources {
		names = append(names, r.Name)
		if !r.Current {
			behind = append(behind, r.Name)
		}
	}
	unsure := e.Error != ""
	leases := ""
	if unsure {
		leases = " The API servers could not all be listed (" + sentenceless(e.Error) + "), so svm cannot tell whether other API servers run"
	}
	switch {
	case len(e.Resources) == 0:
		return nothingRecorded(e), false
	case !read:
		v := "The API servers' encryption configurations were not read"
		if e.Error != "" {
			v = "The API servers' encryption configurations could not be read (" + sentenceless(e.Error) + ")"
		}
		return v + ": svm cannot tell whether the recorded re-encryptions are under the configuration in use, " +
			"so every key is still needed as far as svm knows.", false
	case !e.Agreed && disagree(e):
		return "Re-encryption waits: " + sentence(e.Waiting) + " Every key in every loaded configuration is still needed.", false
	case !e.Agreed:
		return cannotTell(e, leases), false
	case e.ConfigHash == "":
		if unsure {
			return "No API server reached has an encryption configuration loaded: objects they write are written unencrypted." + leases + ".", false
		}
		return "No API server has an encryption configuration loaded: objects are written unencrypted.", false
	case len(behind) == 0:
		return allRewritten(e, names, leases)
	default:
		return notAllRewritten(e, behind), false
	}
}

// nothingRecorded is the verdict when no StorageState records a
// re-encryption.
func nothingRecorded(e *Encryption) string {
	v := "Nothing records a re-encryption: no StorageState has status.encryption, so svm cannot tell whether any stored object " +
		"still needs a key that a configuration only reads with (run svm controller with --encrypted-resources, " +
		"or svm migrate the encrypted resources and check with svm etcd-scan)."
	if !e.Agreed && e.Waiting != "" {
		v += " A re-encryption would wait, too: " + sentence(e.Waiting)
	}
	return v
}

// cannotTell is the verdict when svm status cannot see the API servers
// agree. What stops svm status (a /metrics it may not get, an endpoint it
// was given) need not stop svm controller: it says what svm status cannot
// tell, and what svm controller last recorded, as its own.
func cannotTell(e *Encryption, leases string) string {
	v := "svm status cannot tell that every API server has loaded the same configuration: " + sentence(e.Waiting) +
		" So every key in every loaded configuration is still needed as far as it knows."
	if leases != "" {
		v += leases + "."
	}
	for _, r := range e.Resources {
		if r.Message != "" {
			v += " svm controller last recorded for " + r.Name + ": " + sentence(r.Message)
		}
	}
	return v
}

// allRewritten is the verdict when every resource was rewritten under the
// configuration every API server (reached) has loaded: a key may go only
// when the servers are known from their leases.
func allRewritten(e *Encryption, names []string, leases string) (string, bool) {
	since := ""
	// With KMS v2 keys, Since is only the newest Status call that named
	// them, which the servers make every minute: not worth saying.
	if e.Since != nil && len(e.KMSKeys) == 0 {
		since = " (since " + e.Since.UTC().Format(time.RFC3339) + ")"
	}
	if leases != "" {
		return fmt.Sprintf("Every API server reached has loaded encryption %s%s and every object of %s has been rewritten under it.%s: "+
			"if none does, no object written through the API needs a key that configuration only reads with%s. "+
			"Confirm with svm etcd-scan before removing a key.", under(e), since, strings.Join(names, ", "), leases, otherKMSKeys(e)), false
	}
	return fmt.Sprintf("Every API server has loaded encryption %s%s and every object of %s has been rewritten under it: "+
		"no object written through the API needs a key that configuration only reads with%s. "+
		"Confirm with svm etcd-scan before removing a key.", under(e), since, strings.Join(names, ", "), otherKMSKeys(e)), true
}

// under names what the servers agree on: the configuration, with its
// KMS v2 keys.
func under(e *Encryption) string { return rotation.Describe(e.ConfigHash, e.KMSKeys) }

// otherKMSKeys adds, when the servers agree on KMS v2 keys, that the
// providers' other keys are not needed either.
func otherKMSKeys(e *Encryption) string {
	if len(e.KMSKeys) == 0 {
		return ""
	}
	return ", nor a KMS v2 key other than these"
}

// notAllRewritten is the verdict when some resources are behind, with
// what svm controller last said of each when it said it of this
// configuration: a message about another one would mislead.
func notAllRewritten(e *Encryption, behind []string) string {
	v := fmt.Sprintf("Objects of %s have not all been rewritten under %s yet: every key in the configuration is still needed.",
		strings.Join(behind, ", "), under(e))
	for _, r := range e.Resources {
		switch {
		case r.Current:
		case r.ConfigHash == e.ConfigHash && r.Message != "":
			v += " " + r.Name + ": " + sentence(r.Message)
		case r.ConfigHash != e.ConfigHash:
			v += " " + r.Name + ": svm controller has not recorded configuration " + e.ConfigHash + " yet."
		}
	}
	return v
}

// disagree reports whether two API servers were read with different
// configurations loaded, or with the plugins of a KMS v2 provider
// answering different keys: then re-encryption waits, whatever else could
// or could not be read, and whoever reads.
func disagree(e *Encryption) bool {
	configs := map[string]bool{}
	keys := map[string]map[string]bool{} // provider -> the keys answered
	for _, s := range e.Servers {
		if !s.Reached {
			continue
		}
		configs[s.ConfigHash] = true
		for _, k := range s.KMSKeys {
			if keys[k.Provider] == nil {
				keys[k.Provider] = map[string]bool{}
			}
			keys[k.Provider][k.KeyIDHash] = true
		}
	}
	if len(configs) > 1 {
		return true
	}
	for _, answered := range keys {
		if len(answered) > 1 {
			return true
		}
	}
	return false
}

// sentence ends s with a full stop unless it ends a sentence already.
func sentence(s string) string {
	s = oneLine(s)
	if strings.HasSuffix(s, ".") || strings.HasSuffix(s, "!") || strings.HasSuffix(s, "?") {
		return s
	}
	return s + "."
}

// sentenceless is s without a final full stop, to go inside a sentence.
func sentenceless(s string) string { return strings.TrimSuffix(oneLine(s), ".") }
