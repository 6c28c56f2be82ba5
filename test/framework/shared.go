package framework

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svm-project/svm/test/controlplane"
)

// A package's tests that only create, migrate and read objects of their
// own share one control plane: starting one costs seconds of wall time
// per test, and a package's tests then run side by side (t.Parallel) on
// their own CRD groups (NewResource) and namespaces.
var shared struct {
	sync.Mutex
	main bool
	envs map[string]*sharedEnv
}

type sharedEnv struct {
	once sync.Once
	env  *Env
	err  error
}

// Main runs a package's tests and then stops the control planes they
// shared. A package whose tests call Shared runs it from TestMain:
//
//	func TestMain(m *testing.M) { framework.Main(m) }
func Main(m *testing.M) {
	shared.Lock()
	shared.main = true
	shared.Unlock()
	code := m.Run()
	shared.Lock()
	for _, s := range shared.envs {
		if s.env != nil {
			s.env.Etcd.Close()
			if err := s.env.CP.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "stop the shared control plane: %v\n", err)
				code = 1
			}
		}
	}
	shared.Unlock()
	os.Exit(code)
}

// Shared returns the control plane that the package's tests share for
// opts, starting it on first use, with svm's CRDs installed. Tests on it
// must keep to objects of their own: a resource from NewResource, a
// namespace of their own, and migrations named after them. It stops when
// every test has ended (see Main).
func Shared(t testing.TB, opts controlplane.Options) *Env {
	t.Helper()
	key := fmt.Sprintf("%+v", opts)
	shared.Lock()
	if !shared.main {
		shared.Unlock()
		t.Fatal("framework.Shared needs the package's TestMain to call framework.Main(m)")
	}
	if shared.envs == nil {
		shared.envs = map[string]*sharedEnv{}
	}
	s := shared.envs[key]
	if s == nil {
		s = &sharedEnv{}
		shared.envs[key] = s
	}
	shared.Unlock()
	s.once.Do(func() { s.env, s.err = startShared(opts) })
	if s.err != nil {
		t.Fatalf("start the shared control plane: %v", s.err)
	}
	return s.env
}

func startShared(opts controlplane.Options) (*Env, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	env, err := newEnv(cp)
	if err == nil {
		_, err = env.installCRDs(CRDBasesDir())
	}
	if err != nil {
		_ = cp.Stop()
		return nil, err
	}
	return env, nil
}

var notDNSLabel = regexp.MustCompile(`[^a-z0-9]+`)

// TestName is t's name as a DNS label: lower case, at most 40 characters
// of it, and a hash of the whole that keeps subtests with long, similar
// names apart. Migrations, namespaces and CRD groups named with it belong
// to that test alone.
func TestName(t testing.TB) string {
	name := strings.Trim(notDNSLabel.ReplaceAllString(strings.ToLower(strings.TrimPrefix(t.Name(), "Test")), "-"), "-")
	if len(name) > 40 {
		name = strings.TrimRight(name[:40], "-")
	}
	h := fnv.New32a()
	h.Write([]byte(t.Name()))
	return fmt.Sprintf("%s-%06x", name, h.Sum32()&0xffffff)
}

// NewResource is a two-version custom resource of t's own, widgets in the
// group TestName(t).example.com, and creates its CRD with v1 stored. On a
// shared control plane, objects, storage flips and migrations of it touch
// no other test's.
func (e *Env) NewResource(t testing.TB) Resource {
	t.Helper()
	r := Resource{Group: TestName(t) + ".example.com", Plural: "widgets", Kind: "Widget"}
	e.CreateResource(t, r)
	return r
}
