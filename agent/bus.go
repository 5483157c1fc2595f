package agent

import (
	"sync"
	"sync/atomic"

	"github.com/omnisat/omnisat/pipeline"
)

// bus fans events out to subscribers. Publishing never blocks the agent: a subscriber whose buffer
// is full loses its oldest event, and the loss is counted.
type bus struct {
	mu      sync.Mutex
	subs    map[*subscriber]struct{}
	closed  bool
	dropped atomic.Uint64
}

type subscriber struct {
	ch chan Event
}

func newBus() *bus { return &bus{subs: map[*subscriber]struct{}{}} }

func (b *bus) subscribe(buffer int) (<-chan Event, func()) {
	if buffer < 1 {
		buffer = 256
	}
	sub := &subscriber{ch: make(chan Event, buffer)}
	b.mu.Lock()
	if b.closed {
		close(sub.ch)
	} else {
		b.subs[sub] = struct{}{}
	}
	b.mu.Unlock()
	return sub.ch, func() {
		b.mu.Lock()
		if _, ok := b.subs[sub]; ok {
			delete(b.subs, sub)
			close(sub.ch)
		}
		b.mu.Unlock()
	}
}

func (b *bus) publish(ev Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for sub := range b.subs {
		for {
			select {
			case sub.ch <- ev:
			default:
				select {
				case <-sub.ch:
					b.dropped.Add(1)
				default:
				}
				continue
			}
			break
		}
	}
}

func (b *bus) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	for sub := range b.subs {
		close(sub.ch)
		delete(b.subs, sub)
	}
}

// Dropped is how many events slow subscribers have lost.
func (s *Supervisor) Dropped() uint64 { return s.bus.dropped.Load() }

// energyVAD adapts the pipeline's detector to 16 kHz capture: 100 ms to switch on, 600 ms off.
type energyVAD struct{ v *pipeline.EnergyVAD }

func newEnergyVAD(thresholdDBFS float64) *energyVAD {
	return &energyVAD{pipeline.NewEnergyVAD(inputRate, thresholdDBFS, 100, 600)}
}

// newBargeInVAD detects the user talking over a reply: MinSpeech of speech above the
// threshold switches it on.
func newBargeInVAD(c BargeInConfig) *energyVAD {
	v := pipeline.NewEnergyVAD(inputRate, c.ThresholdDBFS, int(c.MinSpeech.Milliseconds()), 300)
	v.SetAttackGap(3) // "stop", "wait": up to 60 ms of closure inside the minimum speech
	return &energyVAD{v}
}

func (e *energyVAD) process(s []float32) (bool, bool) { return e.v.Process(s) }
