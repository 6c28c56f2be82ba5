// Package docs holds svm's documentation (README.md and docs/*.md) to the
// code, so that what a reader is told is what svm does.
//
// Its tests:
//
//   - run every command the README prints in a shell block, as printed,
//     against a control plane of their own (or name the test elsewhere
//     that runs it), and fail for a command that nothing runs;
//   - follow every relative link, to a file and a heading that exist;
//   - hold docs/architecture.md's floors to the packages' imports;
//   - compare the numbers the docs and help texts share with the code
//     (flag defaults, pacing, retries) with the code's values;
//   - keep the README's support table to the minors the matrix tests run;
//   - and keep the kubectl commands pointed at svm's API. Since Kubernetes
//     v1.37 kube-apiserver serves an in-tree storagemigration.k8s.io/v1
//     StorageVersionMigration by default, and kubectl resolves a plain
//     `storageversionmigrations` to it rather than to svm's
//     migration.k8s.io/v1alpha1 CRD: a documented `kubectl wait` would wait
//     on the wrong objects without an error to tell the reader. So every
//     kubectl command in the docs must name svm's resources with their
//     group (storageversionmigrations.migration.k8s.io,
//     storagestates.migration.k8s.io) or by svm's own short names and
//     category, which the in-tree API lacks.
//
// The package finds commands in Markdown: the kubectl commands of code
// blocks and spans (Commands), the fenced blocks (Fences) and the commands
// of a shell block (Fence.ShellCommands), and the resources a kubectl
// command names without a group (Unqualified). test/integration/cli runs
// the README's wait command against a control plane that serves both APIs.
package docs
