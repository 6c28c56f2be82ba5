package fingerprint

// CRDGeneration is the generation of the CRD read when the fingerprint v
// was made (the last of the generations it names): what a run started at
// v speaks for, which the migration controller stamps as the
// observedGeneration of the CRD's StorageMigrating condition. ok is false
// when v names no CRD svm can read.
func CRDGeneration(v string) (generation int64, ok bool) {
	c, ok := parseCRD(split(v).crd)
	return c.generation, ok
}
