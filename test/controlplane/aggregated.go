package controlplane

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// The sample aggregated API server (k8s.io/sample-apiserver) serves the
// group wardle.example.com: flunders and fischers, stored in this control
// plane's etcd under SampleAPIEtcdPrefix as wardle.example.com/v1alpha1.
const (
	SampleAPIGroup      = "wardle.example.com"
	SampleAPIVersion    = "v1alpha1"
	SampleAPIEtcdPrefix = "/registry/wardle.example.com"
	sampleAPIBinary     = "sample-apiserver"
	sampleAPINamespace  = "kube-system"
	frontProxyUser      = "front-proxy-client"
)

var (
	serviceGVR    = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
)

// frontProxyFlags writes the front-proxy CA and client certificate with
// which kube-apiserver's aggregator authenticates to aggregated API servers,
// and returns the kube-apiserver flags that use them. An aggregated server
// trusts the user names in the request headers only from that client.
func (cp *ControlPlane) frontProxyFlags() ([]string, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "front-proxy-ca"}, caKey)
	if err != nil {
		return nil, fmt.Errorf("generate front-proxy CA: %w", err)
	}
	clientKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	clientCert, err := signClientCert(ca, caKey, clientKey, frontProxyUser)
	if err != nil {
		return nil, err
	}
	clientKeyPEM, err := keyutil.MarshalPrivateKeyToPEM(clientKey)
	if err != nil {
		return nil, err
	}
	caPEM, err := certutil.EncodeCertificates(ca)
	if err != nil {
		return nil, err
	}
	clientPEM, err := certutil.EncodeCertificates(clientCert)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		"front-proxy-ca.crt":     caPEM,
		"front-proxy-client.crt": clientPEM,
		"front-proxy-client.key": clientKeyPEM,
	}
	for name, data := range files {
		if err := os.WriteFile(cp.path(name), data, 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", name, err)
		}
	}
	return []string{
		"--requestheader-client-ca-file=" + cp.path("front-proxy-ca.crt"),
		"--requestheader-allowed-names=" + frontProxyUser,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + cp.path("front-proxy-client.crt"),
		"--proxy-client-key-file=" + cp.path("front-proxy-client.key"),
	}, nil
}

func signClientCert(ca *x509.Certificate, caKey crypto.Signer, key *ecdsa.PrivateKey, commonName string) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    ca.NotBefore,
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("sign %s certificate: %w", commonName, err)
	}
	return x509.ParseCertificate(der)
}

// StartSampleAPIServer starts the sample aggregated API server on this
// control plane's etcd, registers it with kube-apiserver's aggregator, and
// waits until kube-apiserver serves its group. It needs bin/sample-apiserver
// ('make controlplane' builds it). The server stops with the control plane.
func (cp *ControlPlane) StartSampleAPIServer(ctx context.Context) error {
	bin := filepath.Join(cp.binDir, sampleAPIBinary)
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s not found; run 'make controlplane'", bin)
	}
	ports, err := cp.freePorts(1)
	if err != nil {
		return err
	}
	port := ports[0]
	kubeconfig := cp.path("admin.kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	p := &process{
		name:    sampleAPIBinary,
		path:    bin,
		logPath: cp.path("sample-apiserver.log"),
		args: []string{
			"--etcd-servers=" + cp.EtcdURL,
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + cp.path("sample-apiserver-certs"),
			"--kubeconfig=" + kubeconfig,
			"--authentication-kubeconfig=" + kubeconfig,
			"--authorization-kubeconfig=" + kubeconfig,
		},
	}
	if err := p.start(); err != nil {
		return err
	}
	cp.mu.Lock()
	cp.aggregated = append(cp.aggregated, p)
	cp.mu.Unlock()
	// The server's certificate is self-signed; only its liveness is checked
	// here, and the aggregator is told to skip verification below.
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback test server
	readyURL := "https://127.0.0.1:" + strconv.Itoa(port) + "/readyz"
	if err := p.waitReady(ctx, cp.startTimeout, func(ctx context.Context) error { return httpOK(ctx, insecure, readyURL) }); err != nil {
		return err
	}
	return cp.registerSampleAPIServer(ctx, port)
}

// registerSampleAPIServer points an APIService at the server through an
// ExternalName Service: Endpoints may not name loopback addresses, but an
// ExternalName of localhost is resolved by kube-apiserver itself.
func (cp *ControlPlane) registerSampleAPIServer(ctx context.Context, port int) error {
	dyn, err := dynamic.NewForConfig(cp.RESTConfig())
	if err != nil {
		return err
	}
	svc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": sampleAPIBinary, "namespace": sampleAPINamespace},
		"spec": map[string]any{
			"type": "ExternalName", "externalName": "localhost",
			"ports": []any{map[string]any{"port": int64(port), "protocol": "TCP"}},
		},
	}}
	if _, err := dyn.Resource(serviceGVR).Namespace(sampleAPINamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service for the sample API server: %w", err)
	}
	name := SampleAPIVersion + "." + SampleAPIGroup
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"group": SampleAPIGroup, "version": SampleAPIVersion,
			"service":               map[string]any{"namespace": sampleAPINamespace, "name": sampleAPIBinary, "port": int64(port)},
			"insecureSkipTLSVerify": true,
			"groupPriorityMinimum":  int64(1000),
			"versionPriority":       int64(15),
		},
	}}
	if _, err := dyn.Resource(apiServiceGVR).Create(ctx, apiService, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("register the sample API server: %w", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, cp.startTimeout, true, func(ctx context.Context) (bool, error) {
		got, err := dyn.Resource(apiServiceGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		conditions, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conditions {
			c, _ := c.(map[string]any)
			if c["type"] == "Available" && c["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("APIService %s not available after %s; see %s: %w", name, cp.startTimeout, cp.path("sample-apiserver.log"), err)
	}
	return nil
}
