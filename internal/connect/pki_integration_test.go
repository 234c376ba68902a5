//go:build integration

package connect_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// testCA is a certificate authority made by a test, its certificate written to CertPath.
type testCA struct {
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
	CertPath string
	Pool     *x509.CertPool
	dir      string
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key := mustKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca := &testCA{cert: cert, key: key, CertPath: filepath.Join(dir, name+"-ca.pem"), Pool: x509.NewCertPool(), dir: dir}
	ca.Pool.AddCert(cert)
	writePEM(t, ca.CertPath, "CERTIFICATE", der)
	return ca
}

// issued is a certificate the CA signed, as files and as a tls.Certificate.
type issued struct {
	CertPath, KeyPath string
	TLS               tls.Certificate
}

// issue signs a leaf certificate: a server's for the given names (IP addresses or DNS
// names), or a client's when client is true.
func (ca *testCA) issue(t *testing.T, cn string, client bool, names ...string) issued {
	t.Helper()
	key := mustKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	out := issued{CertPath: filepath.Join(ca.dir, cn+".pem"), KeyPath: filepath.Join(ca.dir, cn+"-key.pem")}
	writePEM(t, out.CertPath, "CERTIFICATE", der)
	writePEM(t, out.KeyPath, "EC PRIVATE KEY", keyDER)
	out.TLS, err = tls.LoadX509KeyPair(out.CertPath, out.KeyPath)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// tlsProxy terminates TLS on a loopback port with cfg and forwards every connection to
// backend (the dev server, which speaks plaintext gRPC): a TLS or mTLS Temporal endpoint.
// It returns the proxy's address.
func tlsProxy(t *testing.T, backend string, cfg *tls.Config) string {
	t.Helper()
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"} // gRPC clients insist on ALPN h2
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			track(c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				if err := c.(*tls.Conn).Handshake(); err != nil {
					return
				}
				b, err := net.Dial("tcp", backend)
				if err != nil {
					return
				}
				track(b)
				defer b.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(b, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, b); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}
