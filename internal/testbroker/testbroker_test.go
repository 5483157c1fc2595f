package testbroker_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"testing"
	"time"

	"github.com/omnisat/omnisat/internal/testbroker"
)

// dialMQTT sends a minimal MQTT 3.1.1 CONNECT and expects a CONNACK with return code 0.
func connack(t *testing.T, c net.Conn) {
	t.Helper()
	connect := []byte{0x10, 16, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 30, 0, 4, 't', 'e', 's', 't'}
	if _, err := c.Write(connect); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	buf := make([]byte, 4)
	if _, err := r.Read(buf); err != nil {
		t.Fatalf("read CONNACK: %v", err)
	}
	if buf[0] != 0x20 || buf[3] != 0 {
		t.Fatalf("CONNACK % x", buf)
	}
}

func TestStartStopRestart(t *testing.T) {
	b := testbroker.Start(t)
	c, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	connack(t, c)
	c.Close()
	b.Stop()
	if c, err := net.DialTimeout("tcp", b.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("broker still listening after Stop")
	}
	b.Restart()
	c, err = net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatalf("after Restart: %v", err)
	}
	connack(t, c)
	c.Close()
}

func TestTLS(t *testing.T) {
	b := testbroker.Start(t, testbroker.WithTLS())
	pemData, err := os.ReadFile(b.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemData)
	addr := b.TLSURL()[len("ssl://"):]
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost"})
	if err != nil {
		t.Fatalf("TLS with the test CA: %v", err)
	}
	connack(t, c)
	c.Close()

	wrong, err := testbroker.WriteCAFile(t.TempDir(), "wrong CA")
	if err != nil {
		t.Fatal(err)
	}
	pemData, _ = os.ReadFile(wrong)
	pool = x509.NewCertPool()
	pool.AppendCertsFromPEM(pemData)
	if c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost"}); err == nil {
		c.Close()
		t.Fatal("TLS with a wrong CA succeeded")
	}
}
