package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GroupVersionResource names the resource a migration rewrites and the API
// version it is read and written through. The version only selects the
// endpoint: the API server always encodes to its configured storage version.
type GroupVersionResource struct {
	// Group is the API group of the resource; empty for the core group.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Group string `json:"group,omitempty"`
	// Version is the API version used to reach the resource, for example v1.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Version string `json:"version,omitempty"`
	// Resource is the plural, lower-case resource name, for example secrets.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Resource string `json:"resource,omitempty"`
}

// StorageVersionMigrationSpec is what a migration is asked to do.
//
// The spec names one resource and never changes: to migrate a resource again,
// create another StorageVersionMigration.
type StorageVersionMigrationSpec struct {
	// Resource is the resource to migrate. Immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.resource is immutable: create a new StorageVersionMigration to migrate another resource"
	Resource GroupVersionResource `json:"resource"`

	// ContinueToken is the list continue token of the next chunk to migrate.
	// svm keeps it up to date while the migration is Running, so a restarted
	// controller resumes from it and a reader can see where the migration is.
	// +optional
	// +kubebuilder:validation:MaxLength=8192
	ContinueToken string `json:"continueToken,omitempty"`

	// ThroughStatus lets svm write an object whose write an admission
	// webhook or ValidatingAdmissionPolicy refuses through the resource's
	// status subresource instead, where it has one. The write changes no
	// field either way, and the API server stores the object in the
	// storage version alike; webhooks and policies registered for the
	// resource alone are not asked about its status. Off by default: it
	// passes by a policy, which the cluster's owner should choose to. svm
	// needs patch on the status subresources for it (the opt-in
	// svm-status-writer role, where svm's RBAC is narrowed to named
	// resources).
	// +optional
	ThroughStatus bool `json:"throughStatus,omitempty"`
}

// MigrationConditionType is the type of a migration's condition.
// +kubebuilder:validation:Enum=Running;Succeeded;Failed
type MigrationConditionType string

const (
	// MigrationRunning is True while svm is rewriting the resource.
	MigrationRunning MigrationConditionType = "Running"
	// MigrationSucceeded is True once every object has been rewritten.
	MigrationSucceeded MigrationConditionType = "Succeeded"
	// MigrationFailed is True when the migration ended without rewriting
	// every object; its reason and message say why.
	MigrationFailed MigrationConditionType = "Failed"
)

// MigrationCondition describes one aspect of a migration's state. Its shape
// is the reference migrator's (lastUpdateTime, not lastTransitionTime), so
// `kubectl wait --for=condition=Succeeded` and existing scripts work.
type MigrationCondition struct {
	// Type of the condition.
	// +required
	Type MigrationConditionType `json:"type"`
	// Status of the condition, one of True, False, Unknown.
	// +required
	// +kubebuilder:validation:Enum=True;False;Unknown
	Status corev1.ConditionStatus `json:"status"`
	// LastUpdateTime is the last time this condition was updated.
	// +optional
	LastUpdateTime metav1.Time `json:"lastUpdateTime,omitempty"`
	// Reason is a machine-readable CamelCase reason for the last transition.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
	// Message is a human-readable explanation of the last transition.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Message string `json:"message,omitempty"`
}

// MigrationProgress counts the objects a migration has handled so far.
// Every listed object is counted once, in one of restored,
// alreadyCurrent, writtenSinceStart, writtenSinceChange, gone and failed. The objects
// migrated are restored plus alreadyCurrent.
type MigrationProgress struct {
	// Listed is the number of objects read from the API server.
	// +optional
	Listed int64 `json:"listed,omitempty"`
	// Restored is the number of objects svm wrote and the API server
	// stored anew (its answer carried a new resourceVersion): they were
	// in an older storage version or under an older key, or needed
	// re-encoding for another reason.
	// +optional
	Restored int64 `json:"restored,omitempty"`
	// AlreadyCurrent is the number of objects svm wrote that the API
	// server left as they were (its answer carried the resourceVersion
	// listed): their stored bytes were already what it would write.
	// +optional
	AlreadyCurrent int64 `json:"alreadyCurrent,omitempty"`
	// WrittenSinceStart is the number of objects svm did not need to
	// write: written after the migration started, by another client or by
	// this migration before it was interrupted, and so stored in the
	// current form already.
	// +optional
	WrittenSinceStart int64 `json:"writtenSinceStart,omitempty"`
	// WrittenSinceChange is the number of objects svm did not need to
	// write, and sent no request for: written after every API server
	// stored the resource in the target version (the StorageState's
	// currentStorageVersionRevision), before the migration started.
	// +optional
	WrittenSinceChange int64 `json:"writtenSinceChange,omitempty"`
	// Gone is the number of listed objects deleted before svm wrote them.
	// +optional
	Gone int64 `json:"gone,omitempty"`
	// Failed is the number of objects svm could not write.
	// +optional
	Failed int64 `json:"failed,omitempty"`
	// ThroughStatus is the number of objects svm wrote through their
	// status subresource after an admission webhook or policy refused
	// their own write (spec.throughStatus); each is also counted in
	// restored or alreadyCurrent.
	// +optional
	ThroughStatus int64 `json:"throughStatus,omitempty"`
	// ManagedFieldsMoved is the number of objects whose managedFields
	// entries svm moved off the versions the CRD's status.storedVersions
	// is to be pruned of, to the version objects are written through;
	// each is also counted in restored or alreadyCurrent.
	// +optional
	ManagedFieldsMoved int64 `json:"managedFieldsMoved,omitempty"`
	// ManagedFieldsLeft counts, by why, the managedFields entries svm left
	// naming such a version; absent when none. The objects are stored in
	// the storage version all the same, but server-side apply on them
	// fails once the version they name is removed from the CRD, which svm
	// retire refuses to do while any is left.
	// +optional
	ManagedFieldsLeft *ManagedFieldsLeft `json:"managedFieldsLeft,omitempty"`
	// RemainingEstimate is the API server's estimate of the objects still to
	// be listed (the list's remainingItemCount); absent when unknown.
	// +optional
	RemainingEstimate *int64 `json:"remainingEstimate,omitempty"`
}

// ManagedFieldsLeft counts managedFields entries left naming a version to
// be pruned, by why.
type ManagedFieldsLeft struct {
	// NotInVersion: the version kept has no such field.
	// +optional
	NotInVersion int64 `json:"notInVersion,omitempty"`
	// NotServed: the version named is not served, and the API server
	// cannot convert from it.
	// +optional
	NotServed int64 `json:"notServed,omitempty"`
	// NotConverted: the conversion does not carry the fields one to one.
	// +optional
	NotConverted int64 `json:"notConverted,omitempty"`
	// Refused: the API server refused the dry run that converts them.
	// +optional
	Refused int64 `json:"refused,omitempty"`
	// Unplaced: no change to the object shows where a field is.
	// +optional
	Unplaced int64 `json:"unplaced,omitempty"`
	// Denied: an admission webhook or policy refused the write that moves
	// them (the object was re-stored through its status subresource,
	// which keeps them, under spec.throughStatus).
	// +optional
	Denied int64 `json:"denied,omitempty"`
}

// MigrationPacing is how many writes svm keeps in flight, and why: adaptive
// pacing measures the API server's rate against the writes in flight and
// aims just past the knee of that curve, the fewest writes in flight that
// get 0.95 of the best rate measured, with a margin above. Under a qps
// cap, svm also keeps no more in flight than the rate needs.
type MigrationPacing struct {
	// WritesPerSecond is the rate of the writes answered over pacing's
	// last epoch (half a second or more), rounded.
	// +optional
	WritesPerSecond int32 `json:"writesPerSecond,omitempty"`
	// QPS is the cap on the requests per second svm sends (its --qps),
	// shared by the migrations of its process; absent when there is none.
	// +optional
	QPS *resource.Quantity `json:"qps,omitempty"`
	// RateWindow is the most writes in flight the qps cap allows at the
	// smoothed latency: the rate times the latency, to the nearest whole
	// write, one at least. No more are in flight than both it and window allow. Absent
	// without a cap.
	// +optional
	RateWindow int32 `json:"rateWindow,omitempty"`
	// WritesInFlight is the number of writes sent and not yet answered.
	WritesInFlight int32 `json:"writesInFlight"`
	// Window is the most writes pacing allows in flight now.
	Window int32 `json:"window"`
	// SmoothedLatency is the recent average time a write took.
	SmoothedLatency metav1.Duration `json:"smoothedLatency"`
	// KneeWrites is the fewest writes in flight that got 0.95 of the best
	// rate measured so far; absent while only the most writes tried get
	// it.
	// +optional
	KneeWrites int32 `json:"kneeWrites,omitempty"`
	// LastDecision is pacing's last decision: Grow (only the most writes
	// tried get the best rate, so the window grows by half), Knee (the
	// window is set around the measured knee), BackOff (a 429, a surge
	// of latency or a failed write cut it) or Hold (under a qps cap, the
	// rate needed fewer writes in flight than the window, so the cap, not
	// the server, set the rate, and the window holds).
	// +optional
	// +kubebuilder:validation:Enum=Grow;Knee;BackOff;Hold
	LastDecision string `json:"lastDecision,omitempty"`
}

// FailedObject names an object a migration could not rewrite.
type FailedObject struct {
	// Namespace of the object; empty for cluster-scoped resources.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
	// Name of the object.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Reason is why the write failed, as the API server said it.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
}

// AdmissionRefusal is an admission webhook or ValidatingAdmissionPolicy
// that refused svm's writes, and how many objects it left unmigrated.
type AdmissionRefusal struct {
	// Kind is Webhook or ValidatingAdmissionPolicy.
	// +required
	// +kubebuilder:validation:Enum=Webhook;ValidatingAdmissionPolicy
	Kind string `json:"kind"`
	// Name is the webhook's name, or the policy's.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Binding is the ValidatingAdmissionPolicyBinding that applied the
	// policy; empty for a webhook.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Binding string `json:"binding,omitempty"`
	// Subresource is "status" when it refused the write through the
	// status subresource (spec.throughStatus), empty for the object's own.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Subresource string `json:"subresource,omitempty"`
	// Objects is the number of objects it refused that stayed unmigrated.
	Objects int64 `json:"objects"`
	// Message is what the API server said the first time, the refuser's
	// own words.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// StorageVersionMigrationStatus is what svm observed while migrating.
type StorageVersionMigrationStatus struct {
	// Conditions are the latest observations of the migration's state.
	// +optional
	// +patchMergeKey=type
	// +patchStrategy=merge
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []MigrationCondition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// Progress counts the objects handled so far.
	// +optional
	Progress MigrationProgress `json:"progress,omitempty"`

	// StartTime is when svm started migrating.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// CompletionTime is when the migration ended, successfully or not.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// ResourceVersionCheckpoint is the collection's resourceVersion when the
	// migration started. Any object whose resourceVersion is newer has been
	// written since, so it is already in the current storage version.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ResourceVersionCheckpoint string `json:"resourceVersionCheckpoint,omitempty"`

	// StorageVersionHash is the discovery storageVersionHash of the resource
	// when the migration started: the storage version it migrated to.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	StorageVersionHash string `json:"storageVersionHash,omitempty"`

	// StorageFingerprint records what decided the resource's storage
	// version when the migration started: its CRD's UID and storage
	// version, with the generations svm saw one after another with that
	// storage version, and the resourceVersion of its StorageVersion
	// object where the StorageVersion API is served. If the storage may
	// have changed by the time the migration ends (another storage
	// version, a generation svm did not see, another StorageVersion
	// object), it may have changed while objects were being rewritten,
	// and the migration starts over instead of succeeding.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	StorageFingerprint string `json:"storageFingerprint,omitempty"`

	// InTreeMigration names the storagemigration.k8s.io/v1
	// StorageVersionMigration that kube-controller-manager's in-tree migrator
	// ran for this migration, when svm handed the rewriting to it. Empty when
	// svm's own engine rewrote the objects; progress is then kept by the
	// in-tree object, not here.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	InTreeMigration string `json:"inTreeMigration,omitempty"`

	// Pacing is adaptive pacing's state at the last saved chunk, while
	// svm's engine runs the migration with pacing on; absent otherwise.
	// +optional
	Pacing *MigrationPacing `json:"pacing,omitempty"`

	// FailedObjects names the objects svm could not rewrite (at most 100;
	// progress.failed has the full count).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	FailedObjects []FailedObject `json:"failedObjects,omitempty"`

	// RefusedBy names the admission webhooks and policies that refused
	// svm's writes, each with the objects it left unmigrated (at most 32).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	RefusedBy []AdmissionRefusal `json:"refusedBy,omitempty"`
}

// StorageVersionMigration asks svm to rewrite every object of one resource so
// that the API server re-encodes it in the current storage version (and
// under the current encryption key).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=svmigration,categories=svm
// +kubebuilder:subresource:status
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=https://github.com/kubernetes/community/pull/2524"
// +kubebuilder:printcolumn:name="Resource",type=string,JSONPath=`.spec.resource.resource`
// +kubebuilder:printcolumn:name="Group",type=string,JSONPath=`.spec.resource.group`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.conditions[?(@.status=="True")].type`
// +kubebuilder:printcolumn:name="Restored",type=integer,JSONPath=`.status.progress.restored`
// +kubebuilder:printcolumn:name="Already Current",type=integer,JSONPath=`.status.progress.alreadyCurrent`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.progress.failed`
// +kubebuilder:printcolumn:name="Written Since Start",type=integer,JSONPath=`.status.progress.writtenSinceStart`,priority=1
// +kubebuilder:printcolumn:name="Gone",type=integer,JSONPath=`.status.progress.gone`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="In-Tree Migration",type=string,JSONPath=`.status.inTreeMigration`,priority=1
type StorageVersionMigration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec names the resource to migrate.
	// +required
	Spec StorageVersionMigrationSpec `json:"spec"`

	// Status reports the migration's progress and outcome.
	// +optional
	Status StorageVersionMigrationStatus `json:"status,omitempty"`
}

// StorageVersionMigrationList is a list of StorageVersionMigration.
//
// +kubebuilder:object:root=true
type StorageVersionMigrationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StorageVersionMigration `json:"items"`
}

func init() {
	SchemeBuilder.Register(&StorageVersionMigration{}, &StorageVersionMigrationList{})
}
