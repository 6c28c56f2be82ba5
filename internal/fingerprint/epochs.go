package fingerprint

import (
	"sync"

	apiserverinternalv1alpha1 "k8s.io/api/apiserverinternal/v1alpha1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svm-project/svm/internal/crdversions"
)

// Epochs remembers, for each CRD svm has read (by UID), the run of
// generations it has seen one after another with one storage version,
// the latest it knows of. One is shared by everything in a process that
// reads a CRD for a fingerprint: a generation one of them saw is seen.
//
// A nil *Epochs remembers nothing: every fingerprint then names the
// generation read alone, which is never wrong, only costlier (a spec
// change of more than one generation between two reads counts as a
// storage move).
type Epochs struct {
	mu sync.Mutex
	// runs holds each CRD's run: every generation from its epoch to its
	// generation, the latest seen, had its storage version.
	runs map[types.UID]crdPart
}

// NewEpochs returns an Epochs that knows of no CRD yet.
func NewEpochs() *Epochs {
	return &Epochs{runs: map[types.UID]crdPart{}}
}

// Of is the fingerprint of a resource with CRD crd and StorageVersion
// object sv, either nil when there is none. What it reads of crd joins
// the CRD's run.
func (e *Epochs) Of(crd *apiextensionsv1.CustomResourceDefinition, sv *apiserverinternalv1alpha1.StorageVersion) Fingerprint {
	if crd == nil {
		return value(nil, sv)
	}
	c := crdPart{uid: string(crd.UID), storage: crdversions.StorageVersion(crd), epoch: crd.Generation, generation: crd.Generation}
	c.epoch = e.take(c)
	return value(&c, sv)
}

// Learn takes what a fingerprint svm recorded says of a CRD (a
// StorageState's, a migration's) into its run: what an earlier process,
// or this one, saw. A fingerprint without a CRD part, or one svm cannot
// read, teaches nothing.
func (e *Epochs) Learn(recorded string) {
	if c, ok := parseCRD(split(recorded).crd); ok {
		e.take(c)
	}
}

// take joins c, a read or a record of a CRD, to the CRD's run, and
// returns the epoch of c's generation: the run's when c joins it (same
// storage version, no generation left out between them), else c's own.
// A c newer than the run that does not join it (another storage version,
// or generations unseen in between) begins the CRD's run anew; an older
// one is an old read (a cache that lags) and leaves the run alone.
func (e *Epochs) take(c crdPart) int64 {
	if e == nil {
		return c.epoch
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	uid := types.UID(c.uid)
	r, known := e.runs[uid]
	switch {
	case known && r.joins(c):
		r.epoch, r.generation = min(r.epoch, c.epoch), max(r.generation, c.generation)
		e.runs[uid] = r
		return r.epoch
	case !known || c.generation > r.generation:
		e.runs[uid] = c
	}
	return c.epoch
}
