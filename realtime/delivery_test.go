package realtime_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/omnisat/omnisat/internal/faultproxy"
	"github.com/omnisat/omnisat/realtime"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

func newProxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// taggedChunk is one second of audio whose every sample carries id, so that the simulator's
// record says which chunks arrived.
func taggedChunk(id uint64) realtime.Chunk {
	a := make([]float32, 16000)
	for i := range a {
		a[i] = float32(id) / 1024
	}
	return realtime.Chunk{ID: id, Audio: a}
}

// receivedIDs reads the chunk ids back from what the simulator accepted, in order.
func receivedIDs(rec realtimetest.SessionRecord) []uint64 {
	var ids []uint64
	at := 0
	for _, a := range rec.Appends {
		ids = append(ids, uint64(rec.Audio[at]*1024+0.5))
		at += a.Samples
	}
	return ids
}

func waitAppends(t *testing.T, srv *realtimetest.Server, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if recs := srv.Sessions(); len(recs) > 0 && len(recs[0].Appends) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the simulator never got %d chunks", n)
		}
	}
}

// Once Close has started nothing but the goodbye goes out: Send fails, and media still queued
// is dropped instead of following session.close.
func TestNothingSentAfterClose(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{ForceListenCount: -1}) // input after session.close is a rejection
	proxy := newProxy(t, srv.Addr())
	cfg := fastConfig("ws://"+proxy.Addr()+realtimetest.Path, realtime.DialectCurrent, realtime.ModeAudio)
	cfg.PingInterval, cfg.DeadLinkTimeout, cfg.WriteTimeout = time.Second, time.Minute, time.Minute
	cfg.CloseTimeout, cfg.SendQueue = time.Minute, 4
	s := dial(t, cfg)
	send(t, s, taggedChunk(1))
	waitAppends(t, srv, 1)

	proxy.Stall() // the writer blocks, the queue fills
	accepted := 1
	for id := uint64(2); ; id++ {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := s.Send(ctx, taggedChunk(id))
		cancel()
		if err != nil {
			break
		}
		accepted++
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close(context.Background(), "user_stop") }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := s.Send(ctx, taggedChunk(999))
		cancel()
		if errors.Is(err, realtime.ErrClosed) {
			break
		}
		if err == nil || time.Now().After(deadline) {
			t.Fatalf("send while closing: %v, want ErrClosed", err)
		}
	}
	proxy.Resume()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	rec, err := srv.WaitEnded(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if rec.CloseReason != "user_stop" || rec.Received[len(rec.Received)-1] != "session.close" {
		t.Fatalf("the server's last message from the client: %q (close reason %q)", rec.Received, rec.CloseReason)
	}
	if got := receivedIDs(rec); len(got) >= accepted || slices.Contains(got, 999) {
		t.Fatalf("the server got chunks %v of the %d accepted: the queued ones were not dropped", got, accepted)
	}
}

// On a black-holed link, what the peer never acknowledged is reported back, chunk by chunk, and
// never counted as delivered; none of it arrives later.
func TestUndeliveredOnBlackHole(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{ForceListenCount: -1})
	proxy := newProxy(t, srv.Addr())
	cfg := fastConfig("ws://"+proxy.Addr()+realtimetest.Path, realtime.DialectCurrent, realtime.ModeAudio)
	cfg.SendQueue = 2
	s := dial(t, cfg)
	for id := uint64(1); id <= 3; id++ {
		send(t, s, taggedChunk(id))
	}
	waitAppends(t, srv, 3)

	proxy.Stall()
	accepted := []uint64{1, 2, 3}
	for id := uint64(4); ; id++ { // as the agent does: keep sending until the session ends
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := s.Send(ctx, taggedChunk(id))
		cancel()
		if err == nil {
			accepted = append(accepted, id)
		} else if errors.Is(err, realtime.ErrClosed) {
			break
		}
	}
	var r reply
	drain(t, s, &r, func(ev realtime.Event) bool { _, ok := ev.(realtime.Closed); return ok })
	undelivered, delivered := r.closed.Undelivered, s.Stats().ChunksDelivered
	if r.closed.Err == nil || r.closed.Err.Class != realtime.ClassRetryable {
		t.Fatalf("closed %+v", r.closed)
	}

	proxy.Resume() // whatever the proxy acknowledged reaches the server now
	rec, err := srv.WaitEnded(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	received := receivedIDs(rec)
	t.Logf("accepted %v, received %v, undelivered %v, delivered %d", accepted, received, undelivered, delivered)
	if len(undelivered) == 0 {
		t.Fatal("nothing undelivered: the black hole held nothing back, the test proves nothing")
	}
	if !slices.IsSorted(undelivered) {
		t.Errorf("undelivered %v is not oldest first", undelivered)
	}
	for _, id := range accepted {
		if got, lost := slices.Contains(received, id), slices.Contains(undelivered, id); got == lost {
			t.Errorf("chunk %d: received %v, reported undelivered %v", id, got, lost)
		}
	}
	if int(delivered)+len(undelivered) != len(accepted) {
		t.Errorf("%d delivered + %d undelivered != %d accepted", delivered, len(undelivered), len(accepted))
	}
	for _, id := range accepted[:delivered] { // chunks are delivered in order
		if !slices.Contains(received, id) {
			t.Errorf("chunk %d counted as delivered, but the server never got it", id)
		}
	}
}

// On a healthy link every chunk is eventually counted as delivered, and a clean Close reports
// nothing undelivered.
func TestChunksDelivered(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{ForceListenCount: -1})
	streamFiveDelivered(t, srv, dial(t, fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio)))
}

// streamFiveDelivered sends chunks 1..5 on s and checks that srv got them in order, that all five
// are counted delivered, and that a clean Close reports nothing undelivered.
func streamFiveDelivered(t *testing.T, srv *realtimetest.Server, s realtime.Session) {
	t.Helper()
	for id := uint64(1); id <= 5; id++ {
		send(t, s, taggedChunk(id))
	}
	waitAppends(t, srv, 5)
	for deadline := time.Now().Add(10 * time.Second); s.Stats().ChunksDelivered != 5; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("ChunksDelivered %d, want 5", s.Stats().ChunksDelivered)
		}
	}
	if got := receivedIDs(srv.Sessions()[0]); !reflect.DeepEqual(got, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("the server got chunks %v, want 1..5", got)
	}
	var r reply
	go s.Close(context.Background(), "user_stop")
	drain(t, s, &r, func(ev realtime.Event) bool { _, ok := ev.(realtime.Closed); return ok })
	if r.closed.Err != nil || len(r.closed.Undelivered) != 0 {
		t.Fatalf("clean close: %+v", r.closed)
	}
}

// Close may be called from several places at once; one session.close goes out.
func TestCloseConcurrently(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{})
	s := dial(t, fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio))
	done := make(chan struct{})
	for range 3 {
		go func() {
			s.Close(context.Background(), "user_stop")
			done <- struct{}{}
		}()
	}
	for range 3 {
		<-done
	}
	rec, err := srv.WaitEnded(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := slices.Index(rec.Received, "session.close"); n < 0 || slices.Contains(rec.Received[n+1:], "session.close") {
		t.Fatalf("received %q, want one session.close", rec.Received)
	}
}

// Over TLS (wss://, here through a TLS-terminating reverse proxy, as a gateway behind nginx or
// a load balancer) the session streams and follows delivery the same way: the TLS layer reads
// and writes through the session's raw socket, whose byte count includes TLS framing.
func TestSessionOverTLS(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{ForceListenCount: -1})
	backend, err := url.Parse("http://" + srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(backend))
	proxy.StartTLS()
	defer proxy.Close()
	roots := x509.NewCertPool()
	roots.AddCert(proxy.Certificate())
	cfg := fastConfig("wss://"+proxy.Listener.Addr().String()+realtimetest.Path, realtime.DialectCurrent, realtime.ModeAudio)
	cfg.TLS = &tls.Config{RootCAs: roots}
	streamFiveDelivered(t, srv, dial(t, cfg))
}
