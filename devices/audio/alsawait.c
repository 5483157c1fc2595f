// PortAudio's ALSA host waits for a device buffer by polling the device's descriptors, then
// asking snd_pcm_poll_descriptors_revents what they mean; when a descriptor is ready but the
// device says it is not, PortAudio polls again at once. ALSA's pulse plugin keeps its
// descriptor (a pipe) readable while its capture stream holds less than a fragment, so that
// loop becomes a spin: a whole core on PortAudio's thread until the fragment comes (up to 2 s
// after a stream opens on the test card, see README.md). The linker routes PortAudio's calls
// here (-Wl,--wrap in portaudio.go): when the descriptors said ready and the device says
// nothing is, this pauses a quarter of the device's period before PortAudio asks again. A
// device whose descriptors mean what they say never comes here.
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <time.h>
#include <alsa/asoundlib.h>

int __real_snd_pcm_poll_descriptors_revents(snd_pcm_t *pcm, struct pollfd *pfds, unsigned int nfds,
                                            unsigned short *revents);

// Readiness the device denied, counted for the tests and the close's debug line.
static atomic_llong deniedReadiness;

long long omnisatDeniedReadiness(void) { return atomic_load(&deniedReadiness); }

// pauseNanos is a quarter of pcm's period, between 1 and 20 ms.
static long pauseNanos(snd_pcm_t *pcm) {
	snd_pcm_uframes_t buffer = 0, period = 0;
	unsigned int rate = 0;
	snd_pcm_hw_params_t *hw;
	snd_pcm_hw_params_alloca(&hw);
	long ns = 5000000;
	if (snd_pcm_get_params(pcm, &buffer, &period) == 0 && snd_pcm_hw_params_current(pcm, hw) == 0 &&
	    snd_pcm_hw_params_get_rate(hw, &rate, NULL) == 0 && rate > 0 && period > 0)
		ns = (long)(period * 250000000ULL / rate);
	if (ns < 1000000)
		ns = 1000000;
	if (ns > 20000000)
		ns = 20000000;
	return ns;
}

int __wrap_snd_pcm_poll_descriptors_revents(snd_pcm_t *pcm, struct pollfd *pfds, unsigned int nfds,
                                            unsigned short *revents) {
	int err = __real_snd_pcm_poll_descriptors_revents(pcm, pfds, nfds, revents);
	if (err < 0 || *revents != 0)
		return err;
	int ready = 0;
	for (unsigned int i = 0; i < nfds; i++)
		if (pfds[i].revents & (POLLIN | POLLOUT))
			ready = 1;
	if (!ready)
		return err; // the poll timed out: PortAudio's own timeout handling
	atomic_fetch_add(&deniedReadiness, 1);
	struct timespec pause = {0, pauseNanos(pcm)};
	while (nanosleep(&pause, &pause) != 0 && errno == EINTR)
		;
	return err;
}
