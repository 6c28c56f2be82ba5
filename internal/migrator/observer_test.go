package migrator

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// recorder remembers the events it observes, by name.
type recorder struct {
	NopObserver
	name   string
	events *[]string
}

func (r recorder) ObjectMigrated(_ schema.GroupResource, restored bool) {
	*r.events = append(*r.events, r.name+map[bool]string{true: " restored", false: " already current"}[restored])
}
func (r recorder) Retry(_ schema.GroupResource, err error) {
	*r.events = append(*r.events, r.name+" retry "+err.Error())
}

func TestObservers(t *testing.T) {
	var events []string
	obs := Observers(recorder{name: "a", events: &events}, nil, recorder{name: "b", events: &events})
	gr := schema.GroupResource{Resource: "secrets"}
	obs.ObjectMigrated(gr, true)
	obs.Retry(gr, errors.New("throttled"))
	// Events a recorder does not implement fall to NopObserver.
	obs.LimiterWaited(gr, time.Second)
	obs.RunEnded(gr, nil)
	want := []string{"a restored", "b restored", "a retry throttled", "b retry throttled"}
	if diff := cmp.Diff(want, events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if _, ok := Observers(nil, recorder{name: "only", events: &events}).(recorder); !ok {
		t.Error("one observer is not returned as is")
	}
}
