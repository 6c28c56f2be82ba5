// Package rotation decides when the stored objects of a resource must be
// re-encrypted after an encryption-at-rest configuration change, and when
// a configuration's old keys are no longer needed.
//
// It is pure: its inputs are what the API servers reported (package
// apiservers), svm's StorageStates and migrations; its outputs are what to
// do and what to record. The controller in internal/controller/encryption
// carries them out, and `svm status` shows them.
//
// The rule: a re-encryption starts only once every running API server has
// loaded the same configuration, since until then a server still on the
// old one writes with the old key. A migration of the resource that
// succeeded (svm's re-encryption, the trigger's, a user's) proves the
// objects rewritten if it was created after the last of them loaded that
// configuration; then every object written through the API is encrypted
// as that configuration writes, and keys it only reads with are no longer
// needed for the resource.
//
// A KMS v2 key rotation changes no configuration: the plugin answers a
// new key ID, and each API server swaps its write key at its next Status
// call. The same rule holds with the configuration and the KMS v2 key of
// each provider together as what the servers must agree on: every server
// answers the same key, and is seen writing under it (see kmsAgreement).
package rotation
