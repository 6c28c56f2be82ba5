package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// UnknownStorageVersionHash is the persisted hash that means "objects of this
// resource may be stored in any version": it is not safe to move to an API
// server that cannot read every version the resource ever had.
const UnknownStorageVersionHash = "Unknown"

// GroupResource names a resource independently of the version it is served in.
type GroupResource struct {
	// Group is the API group of the resource; empty for the core group.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Group string `json:"group,omitempty"`
	// Resource is the plural, lower-case resource name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Resource string `json:"resource,omitempty"`
}

// StorageStateSpec names the resource a StorageState is about.
type StorageStateSpec struct {
	// Resource is the resource this StorageState is about. Immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.resource is immutable"
	Resource GroupResource `json:"resource"`
}

// StorageStateStatus records which storage versions objects of a resource
// may be encoded in.
type StorageStateStatus struct {
	// PersistedStorageVersionHashes are the storage version hashes that
	// stored objects of the resource might still be encoded in. "Unknown"
	// means any version. It is not safe to upgrade or downgrade to an API
	// server that cannot decode every version listed here, or if "Unknown" is
	// listed. A completed migration refines it to the current hash alone.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	PersistedStorageVersionHashes []string `json:"persistedStorageVersionHashes,omitempty"`

	// CurrentStorageVersionHash is the storage version hash the API server
	// reports now (discovery's storageVersionHash), or "Unknown" while API
	// servers disagree.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	CurrentStorageVersionHash string `json:"currentStorageVersionHash,omitempty"`

	// CurrentStorageVersionSince is when svm first saw the resource's
	// storage as it is now: the current storage version hash, the storage
	// StorageFingerprint names, and for a custom resource the versions its
	// CRD's status.storedVersions list. For a custom resource, svm waits
	// after it before migrating: the settle delay, for every API server to
	// see the CRD's change, and the drain margin, for the writes an API
	// server accepted under the old storage version to land.
	// +optional
	CurrentStorageVersionSince *metav1.Time `json:"currentStorageVersionSince,omitempty"`

	// StorageFingerprint is what decided the resource's storage version
	// when svm last looked: its CRD's UID and storage version, with the
	// generations svm saw one after another with that storage version
	// (first..last), and the resourceVersion of its StorageVersion object
	// where the StorageVersion API is served (the migrations'
	// status.storageFingerprint says the same of their start). A change of
	// it that may be a storage change (another CRD, another storage
	// version, a generation svm did not see, another StorageVersion
	// object), like a version the CRD's status.storedVersions gain,
	// restarts CurrentStorageVersionSince and drops
	// CurrentStorageVersionRevision, even when the storage version hash is
	// the same: a CRD whose storage version went away and came back may
	// hold objects written in the other version in between. A spec change
	// svm saw that left the storage version alone does not.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	StorageFingerprint string `json:"storageFingerprint,omitempty"`

	// CurrentStorageVersionRevision is an etcd revision (a resourceVersion
	// of the resource) read once every API server was known to store the
	// resource in the current storage version and no write they accepted
	// in another could still land: the StorageVersion API reported it as
	// their common encoding version, or, for a custom resource, the settle
	// delay and the drain margin had passed since
	// CurrentStorageVersionSince. An object with a newer resourceVersion
	// is stored in the current version, and the trigger's migrations to it
	// skip such objects without a request, as long as the storage is the
	// one StorageFingerprint names. Empty where that cannot be known:
	// discovery alone (one API server's view), while API servers disagree,
	// after a reset, and after any change of storage until svm's next
	// migration for it.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	CurrentStorageVersionRevision string `json:"currentStorageVersionRevision,omitempty"`

	// ServersDisagree, while CurrentStorageVersionHash is "Unknown"
	// because svm cannot tell that every API server stores the resource in
	// one version, says which server reports which version, or which could
	// not be read and how to have it read. Empty when they agree.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	ServersDisagree string `json:"serversDisagree,omitempty"`

	// LastHeartbeatTime is the last time svm checked the resource's storage
	// version and updated this status.
	// +optional
	LastHeartbeatTime metav1.Time `json:"lastHeartbeatTime,omitempty"`

	// Encryption is where the re-encryption of the resource's stored
	// objects stands, for the resources svm controller re-encrypts
	// (--encrypted-resources). Unset for the others.
	// +optional
	Encryption *StorageEncryption `json:"encryption,omitempty"`
	// PruneHeld, for a custom resource, says why svm keeps versions in
	// its CRD's status.storedVersions although a migration rewrote every
	// object in the storage version: managedFields entries still name
	// them, and pruning would let them be removed from the CRD, after
	// which every server-side apply on those objects fails. svm tries
	// again after a delay that doubles each time (its migrations' retry
	// delay); unset when nothing holds a prune.
	// +optional
	PruneHeld *PruneHold `json:"pruneHeld,omitempty"`
}

// PruneHold is what keeps versions in a CRD's status.storedVersions after
// every object was rewritten in the storage version.
type PruneHold struct {
	// Reason is ManagedFieldsLeft: managedFields entries name a version
	// to be pruned, and svm could not move them.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason"`
	// Entries counts the entries the migration left naming such a
	// version.
	Entries int64 `json:"entries"`
	// Migration names the migration that left them.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Migration string `json:"migration,omitempty"`
	// Since is when svm first held the prune for this reason.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// Message says what holds the prune, by why the entries were left,
	// and what the user can do.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// PruneHeldManagedFieldsLeft is PruneHold's reason when managedFields
// entries name a version to be pruned.
const PruneHeldManagedFieldsLeft = "ManagedFieldsLeft"

// StorageEncryption records which encryption-at-rest configuration the
// stored objects of a resource have all been rewritten under. API servers
// identify a configuration by the hash of its file, as they report it in
// apiserver_encryption_config_controller_last_config_info.
type StorageEncryption struct {
	// ConfigHash is the configuration every API server had loaded at svm's
	// last look; empty while they disagreed or one could not be read.
	// +optional
	// +kubebuilder:validation:MaxLength=80
	ConfigHash string `json:"configHash,omitempty"`

	// KMSKeys are, per KMS v2 provider of that configuration, the key
	// every API server wrote under at svm's last look; empty while they
	// disagreed, or when the configuration has no KMS v2 provider.
	// +optional
	// +listType=map
	// +listMapKey=provider
	// +kubebuilder:validation:MaxItems=64
	KMSKeys []KMSKey `json:"kmsKeys,omitempty"`

	// RewrittenConfigHash is the configuration that every API server had
	// loaded from before the last successful migration of the resource
	// (svm's re-encryption, or any other made since they all loaded it)
	// was created until it ended. Every object written through the API since is
	// encrypted as that configuration writes (with its first provider and
	// key). When it equals ConfigHash, the configuration's other keys are
	// no longer needed for this resource.
	// +optional
	// +kubebuilder:validation:MaxLength=80
	RewrittenConfigHash string `json:"rewrittenConfigHash,omitempty"`

	// RewrittenKMSKeys are the KMS v2 keys every API server wrote under
	// (KMSKeys) when that migration was made: with RewrittenConfigHash,
	// what the stored objects were all rewritten under. A KMS v2 key
	// rotation changes no configuration, only these.
	// +optional
	// +listType=map
	// +listMapKey=provider
	// +kubebuilder:validation:MaxItems=64
	RewrittenKMSKeys []KMSKey `json:"rewrittenKMSKeys,omitempty"`

	// RewrittenTime is when that migration completed.
	// +optional
	RewrittenTime *metav1.Time `json:"rewrittenTime,omitempty"`

	// RewrittenBy names the migration that did it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	RewrittenBy string `json:"rewrittenBy,omitempty"`

	// Message says in words where the re-encryption stands.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// KMSKey is the key a KMS v2 provider of the encryption configuration
// writes under, as API servers tell it in their envelope encryption
// metrics (apiserver_envelope_encryption_key_id_hash_*): by the hash of
// its key ID, never the key ID itself.
type KMSKey struct {
	// Provider is the KMS v2 provider's name in the configuration.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Provider string `json:"provider"`
	// KeyIDHash is "sha256:" and the hex SHA-256 of the key ID the
	// provider's plugin answers.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=80
	KeyIDHash string `json:"keyIDHash"`
}

// StorageState is the state of the storage of one resource: the storage
// versions its stored objects may be encoded in. Its name is
// "<resource>.<group>", or "<resource>" for the core group.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=svmstate,categories=svm
// +kubebuilder:subresource:status
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=https://github.com/kubernetes/community/pull/2524"
// +kubebuilder:validation:XValidation:rule="self.metadata.name == (has(self.spec.resource.group) && size(self.spec.resource.group) > 0 ? self.spec.resource.resource + '.' + self.spec.resource.group : self.spec.resource.resource)",message="metadata.name must be <resource>.<group> (or <resource> for the core group) of spec.resource"
// +kubebuilder:printcolumn:name="Resource",type=string,JSONPath=`.spec.resource.resource`
// +kubebuilder:printcolumn:name="Group",type=string,JSONPath=`.spec.resource.group`
// +kubebuilder:printcolumn:name="Current",type=string,JSONPath=`.status.currentStorageVersionHash`
// +kubebuilder:printcolumn:name="Persisted",type=string,JSONPath=`.status.persistedStorageVersionHashes`
// +kubebuilder:printcolumn:name="Heartbeat",type=date,JSONPath=`.status.lastHeartbeatTime`
type StorageState struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec names the resource.
	// +required
	Spec StorageStateSpec `json:"spec"`

	// Status records the storage versions in use.
	// +optional
	Status StorageStateStatus `json:"status,omitempty"`
}

// StorageStateName is the name of the StorageState of a resource:
// "<resource>.<group>", or "<resource>" for the core group.
func StorageStateName(gr GroupResource) string {
	if gr.Group == "" {
		return gr.Resource
	}
	return gr.Resource + "." + gr.Group
}

// StorageStateList is a list of StorageState.
//
// +kubebuilder:object:root=true
type StorageStateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StorageState `json:"items"`
}

func init() {
	SchemeBuilder.Register(&StorageState{}, &StorageStateList{})
}
