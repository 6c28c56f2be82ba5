// Package bench measures svm against the real control plane. It is not part
// of `make test`; run it with `make bench`.
//
// Every figure is measured within one run on the same data, because the
// machines it runs on are shared and noisy: ratios between strategies mean
// more than absolute rates. The targets the suite judges say yes or no
// only from figures measured in the same run; one that needs a strategy
// the run left out, or more reads than it took, says so instead.
//
// The package's tests (go test without -bench) check the pure parts,
// such as the pooled percentiles and the targets' verdicts, and start no
// control plane.
package bench
