package storagestate

import (
	"context"
	"fmt"
	"slices"
	"time"

	apiserverinternalv1alpha1 "k8s.io/api/apiserverinternal/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/internal/trigger"
)

// watchStorageVersions starts watching StorageVersion objects if the
// cluster serves them, and waits until they are all read. Every change
// calls for a round: a change of encoding version is seen at once, not at
// the next discovery round, so none is missed between two. The informer
// runs until ctx ends.
func (c *Controller) watchStorageVersions(ctx context.Context) error {
	if c.StorageVersions == nil {
		return nil
	}
	served, err := c.storageVersionsServed()
	if err != nil {
		return err
	}
	if !served {
		klog.FromContext(ctx).Info("The StorageVersion API is not served; storage versions come from discovery alone",
			"groupVersion", apiserverinternalv1alpha1.SchemeGroupVersion.String())
		return nil
	}
	client := c.StorageVersions.InternalV1alpha1().StorageVersions()
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return client.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return client.Watch(ctx, opts)
		},
	}
	informer := toolscache.NewSharedIndexInformer(lw, &apiserverinternalv1alpha1.StorageVersion{}, 0, toolscache.Indexers{})
	// The same burst-folding delay as for migrations: API servers of a
	// rolling upgrade update their StorageVersion objects one by one.
	kick := func() { c.kicks.Kick(time.Second) }
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { kick() },
		UpdateFunc: func(any, any) { kick() },
		DeleteFunc: func(any) { kick() },
	}); err != nil {
		return err
	}
	go informer.RunWithContext(ctx)
	if !toolscache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return ctx.Err()
	}
	c.storageVersions = informer.GetStore()
	klog.FromContext(ctx).Info("Watching the StorageVersion API: its common encoding versions prevail over discovery, and migrations wait while API servers disagree")
	return nil
}

// storageVersionsServed asks discovery whether the cluster serves the
// StorageVersion API.
func (c *Controller) storageVersionsServed() (bool, error) {
	gv := apiserverinternalv1alpha1.SchemeGroupVersion.String()
	list, err := c.Discovery.ServerResourcesForGroupVersion(gv)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("discover %s: %w", gv, err)
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "storageversions" }), nil
}

// storageVersion is gr's StorageVersion object, nil when there is none
// (the API not served or not asked for, no object for gr).
func (c *Controller) storageVersion(gr schema.GroupResource) *apiserverinternalv1alpha1.StorageVersion {
	if c.storageVersions == nil {
		return nil
	}
	obj, exists, err := c.storageVersions.GetByKey(resources.StorageVersionName(gr))
	if err != nil || !exists {
		return nil
	}
	sv, _ := obj.(*apiserverinternalv1alpha1.StorageVersion)
	return sv
}

// encoding is what gr's StorageVersion object sv says about gr, nil when
// it says nothing (no object, or gr not yet discovered).
func (c *Controller) encoding(gr schema.GroupResource, sv *apiserverinternalv1alpha1.StorageVersion) *trigger.Encoding {
	kind, ok := c.kinds[gr]
	if sv == nil || !ok {
		return nil
	}
	return trigger.EncodingOf(sv, kind)
}
