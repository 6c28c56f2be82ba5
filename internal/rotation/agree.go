package rotation

import (
	"fmt"
	"slices"
	"strings"
	"time"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/apiservers"
)

// Server is one API server as svm sees it: known from its identity lease,
// from its metrics, or both.
type Server struct {
	// ID is its apiServerID, "" when only its metrics were read.
	ID string `json:"id,omitempty"`
	// IDHash is how its metrics name it; "" for a server without an
	// encryption configuration, known only by its Endpoint.
	IDHash string `json:"idHash,omitempty"`
	// Endpoint is where its metrics were read, "" when they were not.
	Endpoint string `json:"endpoint,omitempty"`
	// ConfigHash is the encryption configuration it has loaded, "" for
	// none (or when it was not read).
	ConfigHash string `json:"configHash,omitempty"`
	// LoadedAt is when it loaded it.
	LoadedAt time.Time `json:"loadedAt,omitzero"`
	// ReloadFailedAt is when a later reload of its configuration file
	// failed, if one did. It holds nothing up: the server goes on writing
	// with the configuration it has (ConfigHash), which is what counts; but
	// the file on disk is not what it uses, and an operator should know.
	ReloadFailedAt time.Time `json:"reloadFailedAt,omitzero"`
	// KMS are the keys of each KMS v2 provider it has called, by
	// provider.
	KMS []apiservers.KMSKey `json:"kms,omitempty"`
	// KMSChecked says that its kms-providers check was asked after its
	// metrics were read, and KMSCheckProblem why it was not ok ("" when
	// it was).
	KMSChecked      bool   `json:"kmsChecked,omitempty"`
	KMSCheckProblem string `json:"kmsCheckProblem,omitempty"`
	// Reached says whether its metrics were read.
	Reached bool `json:"reached"`
}

// Failure is an endpoint whose metrics could not be read.
type Failure struct {
	Endpoint string
	Err      error
}

// Agreement is what the API servers have loaded, together.
type Agreement struct {
	// Servers are every server known, by IDHash.
	Servers []Server `json:"servers"`
	// Agreed is set when every server was read and all have loaded the
	// same configuration (or all none).
	Agreed bool `json:"agreed"`
	// ConfigHash is that configuration, "" when Agreed on none.
	ConfigHash string `json:"configHash,omitempty"`
	// KMSKeys are, per KMS v2 provider, the key every server writes
	// under, when Agreed; none when no server reports a KMS v2 provider.
	KMSKeys []migrationv1alpha1.KMSKey `json:"kmsKeys,omitempty"`
	// Since is when the last of them loaded ConfigHash and wrote under
	// KMSKeys: the later of ConfigSince and KMSSince. A migration created
	// since rewrites every object under both.
	Since time.Time `json:"since,omitzero"`
	// ConfigSince is when the last of them loaded the configuration.
	ConfigSince time.Time `json:"configSince,omitzero"`
	// KMSSince bounds from above when the last of them swapped to
	// KMSKeys. From the metrics alone it is the newest Status answer
	// naming one of the keys, which the servers renew every minute: a
	// caller that looks again and again (the controller) keeps the time
	// it first saw the keys agreed instead (see the controller's
	// pinKMSSince).
	KMSSince time.Time `json:"kmsSince,omitzero"`
	// Waiting says, when not Agreed, why not, in words.
	Waiting string `json:"waiting,omitempty"`
}

// Encrypting reports whether the servers agree on a configuration (not on
// having none).
func (a Agreement) Encrypting() bool { return a.Agreed && a.ConfigHash != "" }

// anyConfig reports whether any server read has an encryption
// configuration loaded.
func (a Agreement) anyConfig() bool {
	for _, s := range a.Servers {
		if s.Reached && s.ConfigHash != "" {
			return true
		}
	}
	return false
}

// Target is what the servers agree on, as a re-encryption records it
// (see Contradicts).
func (a Agreement) Target() string { return target(a.ConfigHash, a.KMSKeys) }

// Contradicts reports whether a server read has loaded a configuration
// other than the target's ("" for none), or answers a KMS v2 key other
// than the target's: objects it writes are not under the target. A
// server that reports no key for a provider is no news.
func (a Agreement) Contradicts(t string) bool {
	config, keys := splitTarget(t)
	for _, s := range a.Servers {
		if s.Reached && (s.ConfigHash != config || s.contradictsKeys(keys)) {
			return true
		}
	}
	return false
}

// Agree puts together the identity leases of the running API servers
// (nil when they could not be listed: the servers reached are then taken
// to be all), the reports read from endpoints and the endpoints that
// could not be read.
func Agree(ids []apiservers.Identity, reports []apiservers.Report, failures []Failure) Agreement {
	a := Agreement{Servers: servers(ids, reports)}
	configs := map[string]bool{}
	for _, s := range a.Servers {
		if s.Reached {
			configs[s.ConfigHash] = true
		}
	}
	why := waitingFor(a.Servers, failures, len(configs))
	keys, kmsSince, kmsWhy := kmsAgreement(a.Servers)
	if why = append(why, kmsWhy...); len(why) > 0 {
		a.Waiting = strings.Join(why, "; ")
		return a
	}
	a.Agreed, a.KMSKeys, a.KMSSince = true, keys, kmsSince
	for h := range configs {
		a.ConfigHash = h
	}
	for _, s := range a.Servers {
		if s.LoadedAt.After(a.ConfigSince) {
			a.ConfigSince = s.LoadedAt
		}
	}
	a.Since = later(a.ConfigSince, a.KMSSince)
	return a
}

// servers lists every server the leases or the reports name, by IDHash,
// then those that name themselves nowhere, by where they were read.
func servers(ids []apiservers.Identity, reports []apiservers.Report) []Server {
	byHash := map[string]*Server{}
	var order []string
	add := func(hash string) *Server {
		if s, ok := byHash[hash]; ok {
			return s
		}
		byHash[hash] = &Server{IDHash: hash}
		order = append(order, hash)
		return byHash[hash]
	}
	for _, id := range ids {
		add(id.IDHash).ID = id.ID
	}
	var anonymous []apiservers.Report
	for _, r := range reports {
		if r.IDHash == "" {
			// A server with no encryption configuration and no reload
			// series does not name itself.
			anonymous = append(anonymous, r)
			continue
		}
		s := add(r.IDHash)
		s.Endpoint, s.ConfigHash, s.LoadedAt, s.ReloadFailedAt, s.Reached = r.Endpoint, r.ConfigHash, r.LoadedAt, r.ReloadFailedAt, true
		s.KMS, s.KMSChecked, s.KMSCheckProblem = r.KMS, r.KMSChecked, r.KMSCheckProblem
	}
	slices.Sort(order)
	var out []Server
	for _, h := range order {
		out = append(out, *byHash[h])
	}
	for _, r := range anonymous {
		out = append(out, Server{Endpoint: r.Endpoint, LoadedAt: r.LoadedAt, Reached: true})
	}
	return out
}

// waitingFor says, in words, why the servers cannot be taken to agree:
// nothing when they can. configs counts the configurations the servers
// reached have loaded ("" for none among them).
func waitingFor(servers []Server, failures []Failure, configs int) []string {
	var why []string
	for _, f := range failures {
		why = append(why, fmt.Sprintf("the metrics of %s could not be read (%v)", f.Endpoint, f.Err))
	}
	var unreached []string
	for _, s := range servers {
		if !s.Reached {
			unreached = append(unreached, s.ID)
		}
	}
	// A server that names no configuration has none; if the leases name
	// servers that were not reached, it may be one of them, or not: svm
	// cannot tell, and waits.
	if len(unreached) > 0 {
		why = append(why, fmt.Sprintf("API server %s did not report its encryption configuration (give its address with --apiserver-endpoints)", strings.Join(unreached, ", ")))
	}
	if len(servers) == 0 && len(failures) == 0 {
		why = append(why, "no API server was found")
	}
	if configs > 1 {
		var loaded []string
		for _, s := range servers {
			if s.Reached {
				loaded = append(loaded, fmt.Sprintf("%s has %s", name(s), orNone(s.ConfigHash)))
			}
		}
		why = append(why, "API servers have loaded different encryption configurations: "+strings.Join(loaded, ", "))
	}
	return why
}

// later is the later of two times.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func name(s Server) string {
	if s.ID != "" {
		return "API server " + s.ID
	}
	return "the API server at " + s.Endpoint
}

func orNone(hash string) string {
	if hash == "" {
		return "no encryption configuration"
	}
	return "configuration " + hash
}
