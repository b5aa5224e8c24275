package redistest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/testkit/redisproc"
)

// TLSInstance is a server started by StartTLS: an Instance (its plain port
// stays open, for the harness and for admin clients) with a TLS port too.
type TLSInstance struct {
	*Instance
	// TLSAddr is "127.0.0.1:<port>" of the TLS port.
	TLSAddr string
	// CAFile is the PEM certificate of the test's own certificate
	// authority, which signed the server's certificate (valid for 127.0.0.1).
	CAFile string
}

// ClientTLS returns a tls.Config that trusts only the test's authority, for
// go-redis's TLSConfig option.
func (i *TLSInstance) ClientTLS(t testing.TB) *tls.Config {
	t.Helper()
	pemBytes, err := os.ReadFile(i.CAFile)
	if err != nil {
		t.Fatalf("redistest: read %s: %v", i.CAFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		t.Fatalf("redistest: %s holds no certificate", i.CAFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// tlsSupport caches SupportsTLS per executable path.
var tlsSupport sync.Map // string -> bool

// SupportsTLS reports whether s was built with TLS support, by starting it
// once with a TLS port and no certificate: a server built with TLS exits
// complaining about the missing key file, one built without it exits
// saying it has no TLS. (Debian's redis-server has TLS; the plain `make`
// builds of Redis 8 and Valkey 9 in the test matrix do not.)
func SupportsTLS(t testing.TB, s Server) bool {
	t.Helper()
	if v, ok := tlsSupport.Load(s.Path); ok {
		return v.(bool)
	}
	port, err := redisproc.FreePort()
	if err != nil {
		t.Fatalf("redistest: pick a port: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.Path, "--port", "0", "--tls-port", strconv.Itoa(port),
		"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	cmd.SysProcAttr = redisproc.SysProcAttr()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("redistest: %s with a TLS port and no certificate did not exit: %v\n%s", s.Name, err, out)
	}
	text := string(out)
	var ok bool
	switch {
	case strings.Contains(text, "Failed finding TLS support"), strings.Contains(text, "connection type tls"):
		ok = false
	case strings.Contains(text, "tls-cert-file"), strings.Contains(text, "tls-key-file"), strings.Contains(text, "Failed to configure TLS"):
		ok = true
	default:
		t.Fatalf("redistest: cannot tell whether %s supports TLS from its output:\n%s", s.Name, text)
	}
	tlsSupport.Store(s.Path, ok)
	return ok
}

// StartTLS is Start with a TLS port beside the plain one, serving a
// certificate for 127.0.0.1 signed by an authority made for this test
// (clients need not present certificates). It skips the test when s was
// built without TLS (see SupportsTLS).
func StartTLS(t testing.TB, s Server, extraArgs ...string) *TLSInstance {
	t.Helper()
	if !SupportsTLS(t, s) {
		t.Skipf("redistest: %s was built without TLS support", s.Name)
	}
	dir := t.TempDir()
	ca, cert, key, err := writeCertificates(dir)
	if err != nil {
		t.Fatalf("redistest: make certificates: %v", err)
	}
	var tlsPort int
	inst := startWithArgs(t, s, func() ([]string, error) {
		p, err := redisproc.FreePort()
		if err != nil {
			return nil, err
		}
		tlsPort = p
		return append([]string{
			"--tls-port", strconv.Itoa(p),
			"--tls-cert-file", cert,
			"--tls-key-file", key,
			"--tls-ca-cert-file", ca,
			"--tls-auth-clients", "no",
		}, extraArgs...), nil
	})
	return &TLSInstance{Instance: inst, TLSAddr: redisproc.Addr(tlsPort), CAFile: ca}
}

// writeCertificates writes a certificate authority and a server
// certificate for 127.0.0.1 signed by it into dir, as PEM files.
func writeCertificates(dir string) (caFile, certFile, keyFile string, err error) {
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caCert, caKey, err := issue(caTmpl, nil, nil)
	if err != nil {
		return "", "", "", fmt.Errorf("issue the authority: %w", err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	srvCert, srvKey, err := issue(srvTmpl, caCert, caKey)
	if err != nil {
		return "", "", "", fmt.Errorf("issue the server certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return "", "", "", err
	}
	caFile, certFile, keyFile = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	for _, f := range []struct {
		path, kind string
		der        []byte
	}{
		{caFile, "CERTIFICATE", caCert.Raw},
		{certFile, "CERTIFICATE", srvCert.Raw},
		{keyFile, "EC PRIVATE KEY", keyDER},
	} {
		b := pem.EncodeToMemory(&pem.Block{Type: f.kind, Bytes: f.der})
		if err := os.WriteFile(f.path, b, 0o600); err != nil {
			return "", "", "", err
		}
	}
	return caFile, certFile, keyFile, nil
}

// issue makes a P-256 key and the certificate of tmpl for it, signed by
// parent's key parentKey, or by the new key itself when parent is nil (a
// self-signed authority).
func issue(tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}
