// Package followup is how svm's deciders follow up on the migrations they
// create: which migrations are theirs and what each was made for, which of
// them still run and must stop once the target moves on, and when a new one
// may follow those that failed.
//
// The storage version trigger (package trigger) and the re-encryption
// (package rotation) follow the same rules for their own migrations, so
// that neither ever stops a migration it did not create and both back off
// alike when their migrations fail. They differ only in the label value
// that marks those migrations and in the annotation that records their
// target (a storage version hash, an encryption configuration hash), which
// a Mark holds.
package followup
