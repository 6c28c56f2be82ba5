// Package bench measures svm against the real control plane. It is not part
// of `make test`; run it with `make bench`.
//
// Every figure is measured within one run on the same data, because the
// machines it runs on are shared and noisy: ratios between strategies mean
// more than absolute rates.
package bench
