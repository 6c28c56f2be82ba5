// Package e2e holds svm's end-to-end tests: svm installed by its chart, as
// the pods a kubelet runs from its image, on a node of test/node. They are
// built with the e2e tag and run by hack/e2e (make e2e), which gives them
// the network and mount namespaces the node needs and puts the machine
// back afterwards.
package e2e
