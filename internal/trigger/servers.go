package trigger

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// ServerView is what one API server's own discovery said of a resource.
type ServerView struct {
	// Server names the server: the address read, with its identity when
	// a lease publishes that address.
	Server string
	// Own says that the address is the server's own, not perhaps a load
	// balancer's, which another server may have answered: only reads at
	// own addresses count toward every server.
	Own bool
	// Hash is the storageVersionHash the server reports for the resource;
	// "" when it does not serve it or could not be read (Err).
	Hash string
	// Err says why the server's discovery could not be read for the
	// resource's group; "" when it was.
	Err string
}

// maxDisagreement bounds Encoding.Disagreement, as the StorageState's
// serversDisagree field does.
const maxDisagreement = 2048

// EncodingOfServers is what the API servers' own discovery says of a
// resource where the StorageVersion API does not: each server reports,
// in discovery, the hash of the version it stores the resource in, so
// that the servers agree on a version when every one reports it. live is
// how many API servers hold a live identity lease (apiservers.Identities).
//
// The hash is Common only when as many servers as hold live leases were
// read at their own addresses and none reports another: a server not
// read may still write the old version through the load balancer, and a
// migration while it does leaves objects behind that the StorageState
// would say are gone. A server that serves no such resource writes none
// and does not count against agreement. Reported holds every hash any
// server reports, so that the StorageState keeps the old one while the
// servers disagree.
func EncodingOfServers(live int, views []ServerView) *Encoding {
	e := &Encoding{}
	read, common := 0, ""
	agree := true
	var unread []string
	for _, v := range views {
		if v.Err != "" {
			unread = append(unread, v.Server+": "+v.Err)
			continue
		}
		if v.Own {
			read++
		}
		if v.Hash == "" {
			continue
		}
		if !slices.Contains(e.Reported, v.Hash) {
			e.Reported = append(e.Reported, v.Hash)
		}
		if common != "" && common != v.Hash {
			agree = false
		}
		common = v.Hash
	}
	slices.Sort(e.Reported)
	switch {
	case !agree:
		e.Disagreement = "API servers store it in different versions: " + byHash(views)
	case read < live:
		e.Disagreement = notAllRead(live, read, views, unread)
	case common == "":
		// No server serves it: nothing to say, nothing stored by any.
		return nil
	default:
		e.Common = common
	}
	e.Disagreement = truncate(e.Disagreement, maxDisagreement)
	return e
}

// byHash says which servers report which hash, grouped by hash.
func byHash(views []ServerView) string {
	servers := map[string][]string{}
	var hashes []string
	for _, v := range views {
		if v.Err != "" || v.Hash == "" {
			continue
		}
		if _, ok := servers[v.Hash]; !ok {
			hashes = append(hashes, v.Hash)
		}
		servers[v.Hash] = append(servers[v.Hash], v.Server)
	}
	parts := make([]string, 0, len(hashes))
	for _, h := range hashes {
		parts = append(parts, fmt.Sprintf("storage version hash %s on %s", h, strings.Join(servers[h], ", ")))
	}
	return strings.Join(parts, "; ")
}

// notAllRead says that fewer servers were read at their own addresses
// than hold live leases, which were not, and how to have each read.
func notAllRead(live, read int, views []ServerView, unread []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d API servers hold live identity leases, %d were read at their own address", live, read)
	if len(unread) > 0 {
		fmt.Fprintf(&b, " (not read: %s)", strings.Join(unread, "; "))
	}
	for _, v := range views {
		if v.Err == "" && !v.Own {
			fmt.Fprintf(&b, "; %s may be a load balancer's address", v.Server)
		}
	}
	if h := byHash(views); h != "" {
		b.WriteString("; read: " + h)
	}
	b.WriteString("; give each API server's own address with --apiserver-endpoints, or serve the StorageVersion API")
	return b.String()
}

// truncate cuts s to at most n bytes, on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const more = "…"
	cut := n - len(more)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + more
}

// ServersBehind says which API servers, read at their own addresses, still
// report another storage version hash for a custom resource than its
// CRD's storage version (storageHash): they have not taken up the CRD's
// change yet, and go on writing the old version. "" when none does. A
// server not read, or not serving the resource, is not taken to be
// behind: the settle delay alone then covers it, as with one server.
func ServersBehind(storageHash string, views []ServerView) string {
	var behind []string
	for _, v := range views {
		if v.Err == "" && v.Own && v.Hash != "" && v.Hash != storageHash {
			behind = append(behind, fmt.Sprintf("%s reports storage version hash %s", v.Server, v.Hash))
		}
	}
	if len(behind) == 0 {
		return ""
	}
	return truncate(fmt.Sprintf("API servers have not all taken up the CRD's storage version (hash %s): %s", storageHash, strings.Join(behind, "; ")), maxDisagreement)
}
