package encryption

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/svm-project/svm/internal/resources"
)

// resolution is what a name of Resources resolved to this round: a
// resource, or why it does not resolve.
type resolution struct {
	res resources.Resource
	err error
}

// resolveAll resolves every name of Resources, as resources.Resolve does
// over every group version the API server serves. Reading them all is a
// request per group version (thousands a minute with a thousand CRDs),
// and a name rarely moves: one resolved at an earlier round is resolved
// again over the group version it resolved in alone, one request, and
// kept when that finds the same resource there. Only a name resolved for
// the first time, or not found again so (its version no longer served,
// the resource gone, that request failed), has every group version read,
// once a round for all such names. An error is that every group version
// could not be read: nothing is decided this round.
func (c *Controller) resolveAll() (map[string]resolution, error) {
	out := make(map[string]resolution, len(c.Resources))
	lists := map[schema.GroupVersion]*metav1.APIResourceList{} // read this round
	var again []string
	for _, name := range c.Resources {
		if r, ok := c.resolveIn(lists, name); ok {
			out[name] = resolution{res: r}
			continue
		}
		again = append(again, name)
	}
	if len(again) == 0 {
		return out, nil
	}
	all, failed, err := resources.DiscoverServed(c.Discovery)
	if err != nil {
		return nil, err
	}
	if c.resolvedIn == nil {
		c.resolvedIn = map[string]schema.GroupVersion{}
	}
	for _, name := range again {
		r, err := resources.Resolve(all, failed, name)
		out[name] = resolution{res: r, err: err}
		if err == nil {
			c.resolvedIn[name] = r.GroupVersion()
		} else {
			delete(c.resolvedIn, name)
		}
	}
	return out, nil
}

// resolveIn resolves name over the group version it resolved in at an
// earlier round, read once a round into lists; ok is false when it did
// not resolve before, or does not resolve there to a resource of that
// group version now.
func (c *Controller) resolveIn(lists map[schema.GroupVersion]*metav1.APIResourceList, name string) (resources.Resource, bool) {
	gv, ok := c.resolvedIn[name]
	if !ok {
		return resources.Resource{}, false
	}
	list, ok := lists[gv]
	if !ok {
		var err error
		if list, err = c.Discovery.ServerResourcesForGroupVersion(gv.String()); err != nil {
			list = nil
		}
		lists[gv] = list // nil: not to be asked again this round
	}
	if list == nil {
		return resources.Resource{}, false
	}
	r, err := resources.Resolve([]*metav1.APIResourceList{list}, nil, name)
	if err != nil || r.GroupVersion() != gv {
		return resources.Resource{}, false
	}
	return r, true
}
