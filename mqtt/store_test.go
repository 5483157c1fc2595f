package mqtt

import (
	"io"
	"sync"
	"testing"

	"github.com/eclipse/paho.mqtt.golang/packets"
)

// TestStoreHandsOutCopiesOfPublishes is what paho does when a link drops while a Publish waits to
// be written: the reconnect marks the stored packet DUP while the writer packs the waiting one.
// Under -race this fails with paho's own store; without -race, the DUP check does.
func TestStoreHandsOutCopiesOfPublishes(t *testing.T) {
	s := newCopyingStore()
	s.Open()
	defer s.Close()
	pub := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
	pub.Qos, pub.MessageID, pub.TopicName, pub.Payload = 1, 7, "omnisat/dev/event", []byte(`{"n":1}`)
	s.Put("o.7", pub)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the new connection's writer
		defer wg.Done()
		if err := pub.Write(io.Discard); err != nil {
			t.Error(err)
		}
	}()
	resumed, ok := s.Get("o.7").(*packets.PublishPacket) // the reconnect's resume
	if !ok {
		t.Fatalf("Get returned %T, want *packets.PublishPacket", s.Get("o.7"))
	}
	resumed.Dup = true
	wg.Wait()

	if pub.Dup {
		t.Fatal("marking the resumed packet DUP changed the packet being written")
	}
	if resumed == pub || resumed.MessageID != 7 || resumed.TopicName != pub.TopicName || string(resumed.Payload) != `{"n":1}` {
		t.Fatalf("resumed packet %+v is not a copy of the stored one", resumed)
	}
	if s.Get("o.8") != nil {
		t.Fatal("Get of a missing key returned a packet")
	}
}
