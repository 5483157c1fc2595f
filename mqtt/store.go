package mqtt

import (
	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
)

// copyingStore is paho's in-memory store, except that it never hands out a PUBLISH that paho
// is writing: it keeps a copy of what it is given and gives out copies of that.
//
// paho's own store keeps the very packet it sends. When the link drops while a Publish waits to
// be written, the reconnect's resume takes the stored packet and sets its DUP flag while the new
// connection's writer packs the same packet (and sets its length) for the waiting Publish: a data
// race inside paho (upstream issue 703, open in v1.5.1). With copies, resume marks and re-sends a
// packet of its own; the broker may see the message twice, which QoS 1 allows.
type copyingStore struct {
	*paho.MemoryStore
}

func newCopyingStore() copyingStore { return copyingStore{paho.NewMemoryStore()} }

// Put is called by Publish before it hands the packet to the writer, so copying it here races
// with nothing.
func (s copyingStore) Put(key string, p packets.ControlPacket) {
	s.MemoryStore.Put(key, copyPublish(p))
}

func (s copyingStore) Get(key string) packets.ControlPacket {
	return copyPublish(s.MemoryStore.Get(key))
}

// copyPublish returns a copy of a PUBLISH and any other packet as it is. The payload is shared:
// nothing writes to it once it is published.
func copyPublish(p packets.ControlPacket) packets.ControlPacket {
	if pub, ok := p.(*packets.PublishPacket); ok {
		c := *pub
		return &c
	}
	return p
}
