// Package testbroker starts a real Mosquitto broker for tests: one process per test, on a free
// loopback port, with its own configuration file, optionally with a TLS listener whose
// certificates come from a test CA generated here. Only the process it started is ever stopped.
//
//	b := testbroker.Start(t)                     // plain listener: b.URL() = tcp://127.0.0.1:PORT
//	b := testbroker.Start(t, testbroker.WithTLS()) // + TLS listener: b.TLSURL(), b.CAFile()
//	b.Stop(); b.Restart()                          // same ports, retained messages are lost (persistence false)
//
// When the mosquitto binary is missing the test is skipped, or fails when the environment has
// CI=true (`make deps` installs it: Debian package mosquitto).
package testbroker

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"github.com/omnisat/omnisat/internal/syncbuf"
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
)

// Option changes how the broker is started.
type Option func(*options)

type options struct {
	tls         bool
	persistence bool
}

// WithTLS adds a TLS listener (server certificate for localhost and 127.0.0.1, signed by a test CA).
func WithTLS() Option { return func(o *options) { o.tls = true } }

// WithPersistence keeps sessions, subscriptions and queued messages across Restart (mosquitto
// writes its database on a clean stop). Without it a restart forgets everything.
func WithPersistence() Option { return func(o *options) { o.persistence = true } }

// Broker is a running Mosquitto started by Start.
type Broker struct {
	t       testing.TB
	bin     string
	dir     string
	conf    string
	port    int
	tlsPort int
	caFile  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	output *syncbuf.Buffer
}

// Start runs mosquitto for the rest of the test; it is stopped by t.Cleanup.
func Start(t testing.TB, opts ...Option) *Broker {
	t.Helper()
	var o options
	for _, f := range opts {
		f(&o)
	}
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		for _, p := range []string{"/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("testbroker: mosquitto not found (install the Debian package mosquitto: make deps): %v", err)
		}
		t.Skipf("testbroker: mosquitto not found, skipping (install the Debian package mosquitto: make deps)")
	}
	b := &Broker{t: t, bin: bin, dir: t.TempDir()}
	b.port = freePort(t)
	var conf strings.Builder
	if os.Geteuid() == 0 {
		// As root mosquitto drops to the user "mosquitto", which cannot read the test's files.
		conf.WriteString("user root\n")
	}
	if o.persistence {
		fmt.Fprintf(&conf, "persistence true\npersistence_location %s/\n", b.dir)
	} else {
		conf.WriteString("persistence false\n")
	}
	conf.WriteString("allow_anonymous true\nlog_dest stderr\nlog_type error\nlog_type warning\nlog_type notice\n")
	fmt.Fprintf(&conf, "listener %d 127.0.0.1\n", b.port)
	if o.tls {
		ca, err := NewCA("omnisat test CA")
		if err != nil {
			t.Fatalf("testbroker: %v", err)
		}
		certPEM, keyPEM, err := ca.Issue("localhost")
		if err != nil {
			t.Fatalf("testbroker: %v", err)
		}
		b.caFile = filepath.Join(b.dir, "ca.pem")
		certFile := filepath.Join(b.dir, "server.pem")
		keyFile := filepath.Join(b.dir, "server.key")
		for _, f := range []struct {
			path string
			data []byte
		}{{b.caFile, ca.CertPEM}, {certFile, certPEM}, {keyFile, keyPEM}} {
			if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
				t.Fatalf("testbroker: write %s: %v", f.path, err)
			}
		}
		b.tlsPort = freePort(t)
		fmt.Fprintf(&conf, "listener %d 127.0.0.1\ncafile %s\ncertfile %s\nkeyfile %s\n", b.tlsPort, b.caFile, certFile, keyFile)
	}
	b.conf = filepath.Join(b.dir, "mosquitto.conf")
	if err := os.WriteFile(b.conf, []byte(conf.String()), 0o600); err != nil {
		t.Fatalf("testbroker: write %s: %v", b.conf, err)
	}
	if err := b.start(); err != nil {
		t.Fatalf("testbroker: %v", err)
	}
	t.Cleanup(b.Stop)
	return b
}

// URL is the plain listener: tcp://127.0.0.1:PORT.
func (b *Broker) URL() string { return "tcp://127.0.0.1:" + strconv.Itoa(b.port) }

// Addr is host:port of the plain listener.
func (b *Broker) Addr() string { return "127.0.0.1:" + strconv.Itoa(b.port) }

// TLSURL is the TLS listener (ssl://localhost:PORT), "" without WithTLS.
func (b *Broker) TLSURL() string {
	if b.tlsPort == 0 {
		return ""
	}
	return "ssl://localhost:" + strconv.Itoa(b.tlsPort)
}

// CAFile is the PEM file of the CA that signed the TLS listener's certificate.
func (b *Broker) CAFile() string { return b.caFile }

// Output is what mosquitto has logged so far (errors, warnings, notices).
func (b *Broker) Output() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.output == nil {
		return ""
	}
	return b.output.String()
}

func (b *Broker) start() error {
	var lastErr error
	// The port was free a moment ago; a restart may race the old socket's release: retry a little.
	for attempt := 0; attempt < 20; attempt++ {
		out := &syncbuf.Buffer{}
		cmd := exec.Command(b.bin, "-c", b.conf)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start %s -c %s: %w", b.bin, b.conf, err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		b.mu.Lock()
		b.cmd, b.exited, b.output = cmd, exited, out
		b.mu.Unlock()
		if err := waitListening(b.port, exited, 5*time.Second); err == nil {
			if b.tlsPort == 0 || waitListening(b.tlsPort, exited, 5*time.Second) == nil {
				return nil
			}
		}
		lastErr = fmt.Errorf("mosquitto on port %d did not start: %s", b.port, strings.TrimSpace(out.String()))
		b.Stop()
		time.Sleep(100 * time.Millisecond)
	}
	return lastErr
}

// Stop ends the broker process (SIGTERM, then SIGKILL after 5 s) and waits for it. Idempotent.
func (b *Broker) Stop() {
	b.mu.Lock()
	cmd, exited := b.cmd, b.exited
	b.cmd = nil
	b.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Restart stops the broker (if running) and starts it again on the same ports.
func (b *Broker) Restart() {
	b.t.Helper()
	b.Stop()
	if err := b.start(); err != nil {
		b.t.Fatalf("testbroker: restart: %v", err)
	}
}

func waitListening(port int, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("mosquitto exited")
		default:
		}
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("port %d not listening after %v", port, timeout)
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testbroker: find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// CA is a test certificate authority.
type CA struct {
	CertPEM []byte
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
}

// NewCA makes a self-signed CA valid for a day.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	return &CA{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert: cert, key: key}, nil
}

// Issue makes a certificate for host (also valid for 127.0.0.1 and ::1), returned as PEM.
func (ca *CA) Issue(host string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key for %s: %w", host, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("issue certificate for %s: %w", host, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode key for %s: %w", host, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// WriteCAFile writes a fresh, unrelated CA certificate to dir and returns its path: a "wrong CA"
// for tests that must see verification fail.
func WriteCAFile(dir, name string) (string, error) {
	ca, err := NewCA(name)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".pem")
	if err := os.WriteFile(p, ca.CertPEM, 0o600); err != nil {
		return "", fmt.Errorf("write CA %s: %w", p, err)
	}
	return p, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}
