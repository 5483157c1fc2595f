/*
 * A sound card for BenchmarkFootprint where the kernel has none: an ALSA external PCM plugin
 * ("type paced") that plays into nothing and captures silence, paced by a timer as a hardware
 * card is paced by its period interrupts. Its hardware pointer moves one period at a time, at
 * the wall clock's pace, and its poll descriptor (a timerfd) becomes readable once a period, so
 * PortAudio's ALSA host sees what it sees on a Raspberry Pi's card without a sound server in
 * between: one wake-up per period, buffers handed over in periods. With a capture file (raw
 * signed 16-bit little-endian mono at 48 kHz) it captures that, looped, on every channel
 * instead of silence: a room where someone talks, which the simulator answers.
 *
 *   cc -shared -fPIC -DPIC -O2 -o libasound_module_pcm_paced.so pcm_paced.c -lasound
 *
 *   pcm_type.paced { lib "/path/libasound_module_pcm_paced.so" }
 *   pcm.!default { type paced }    or    pcm.!default { type paced capture "/path/talk.raw" }
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>
#include <alsa/asoundlib.h>
#include <alsa/pcm_external.h>

typedef struct {
	snd_pcm_ioplug_t io;
	int timer;
	struct timespec start;
	int running;
	/* The capture file (-1: silence), read a block at a time as a card's DMA fills a small
	 * ring: holding the whole file would charge the process measured with the test card's
	 * memory. */
	int talk_fd;
	size_t talk_n, talk_at; /* samples in the file, the next one to capture */
	int16_t block[1024];
	size_t block_at, block_n; /* the next sample in block, samples read into it */
} paced_t;

/* open_talk opens a capture file; a negative errno when it cannot. */
static int open_talk(paced_t *p, const char *path) {
	p->talk_fd = open(path, O_RDONLY | O_CLOEXEC);
	if (p->talk_fd < 0)
		return -errno;
	struct stat st;
	if (fstat(p->talk_fd, &st) < 0)
		return -errno;
	if (st.st_size < 2)
		return -EINVAL;
	p->talk_n = st.st_size / 2;
	return 0;
}

/* next_talk is the capture file's next sample, looping; silence if the file cannot be read. */
static int16_t next_talk(paced_t *p) {
	if (p->block_at == p->block_n) {
		size_t want = p->talk_n - p->talk_at;
		if (want > sizeof p->block / sizeof p->block[0])
			want = sizeof p->block / sizeof p->block[0];
		ssize_t n = pread(p->talk_fd, p->block, want * 2, (off_t)p->talk_at * 2);
		if (n < 2)
			return 0;
		p->block_at = 0;
		p->block_n = n / 2;
		p->talk_at = (p->talk_at + p->block_n) % p->talk_n;
	}
	return p->block[p->block_at++];
}

/* talk fills size frames at offset with the capture file's next samples, in the format asked. */
static void talk(paced_t *p, const snd_pcm_channel_area_t *areas, snd_pcm_uframes_t offset, snd_pcm_uframes_t size) {
	for (snd_pcm_uframes_t i = 0; i < size; i++) {
		int16_t v = next_talk(p);
		for (unsigned c = 0; c < p->io.channels; c++) {
			char *dst = (char *)areas[c].addr + (areas[c].first + (offset + i) * areas[c].step) / 8;
			switch (p->io.format) {
			case SND_PCM_FORMAT_S16_LE:
				*(int16_t *)dst = v;
				break;
			case SND_PCM_FORMAT_S32_LE:
				*(int32_t *)dst = (int32_t)((uint32_t)(uint16_t)v << 16);
				break;
			default:
				*(float *)dst = v / 32768.0f;
			}
		}
	}
}

static uint64_t elapsed_frames(paced_t *p) {
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	int64_t ns = (int64_t)(now.tv_sec - p->start.tv_sec) * 1000000000 + (now.tv_nsec - p->start.tv_nsec);
	if (ns < 0)
		return 0;
	return (uint64_t)((__int128)ns * p->io.rate / 1000000000);
}

static int paced_start(snd_pcm_ioplug_t *io) {
	paced_t *p = io->private_data;
	uint64_t ns = (uint64_t)io->period_size * 1000000000 / io->rate;
	struct itimerspec its = {
		.it_interval = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000},
		.it_value = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000},
	};
	clock_gettime(CLOCK_MONOTONIC, &p->start);
	p->running = 1;
	return timerfd_settime(p->timer, 0, &its, NULL) < 0 ? -errno : 0;
}

/* Before it starts, a playback card's empty buffer is writable at once: a timer that has
 * already expired says so to poll. */
static int arm_now(paced_t *p) {
	struct itimerspec its;
	memset(&its, 0, sizeof(its));
	its.it_value.tv_nsec = 1;
	return timerfd_settime(p->timer, 0, &its, NULL) < 0 ? -errno : 0;
}

static int paced_prepare(snd_pcm_ioplug_t *io) {
	paced_t *p = io->private_data;
	p->running = 0;
	return io->stream == SND_PCM_STREAM_PLAYBACK ? arm_now(p) : 0;
}

/* PACED_DEBUG=1 logs the period and buffer the application chose. */
static int paced_hw_params(snd_pcm_ioplug_t *io, snd_pcm_hw_params_t *params) {
	(void)params;
	if (getenv("PACED_DEBUG"))
		SNDERR("paced: %s, %u Hz, %u channels, period %lu frames, buffer %lu frames",
			io->stream == SND_PCM_STREAM_PLAYBACK ? "playback" : "capture", io->rate, io->channels,
			(unsigned long)io->period_size, (unsigned long)io->buffer_size);
	return 0;
}

static int paced_stop(snd_pcm_ioplug_t *io) {
	paced_t *p = io->private_data;
	struct itimerspec off;
	memset(&off, 0, sizeof(off));
	p->running = 0;
	timerfd_settime(p->timer, 0, &off, NULL);
	return 0;
}

/* The hardware pointer, in whole periods, within the buffer. */
static snd_pcm_sframes_t paced_pointer(snd_pcm_ioplug_t *io) {
	paced_t *p = io->private_data;
	if (!p->running)
		return 0;
	uint64_t f = elapsed_frames(p);
	return (snd_pcm_sframes_t)(f % io->buffer_size);
}

static snd_pcm_sframes_t paced_transfer(snd_pcm_ioplug_t *io, const snd_pcm_channel_area_t *areas,
		snd_pcm_uframes_t offset, snd_pcm_uframes_t size) {
	paced_t *p = io->private_data;
	if (io->stream == SND_PCM_STREAM_CAPTURE && p->talk_fd >= 0)
		talk(p, areas, offset, size);
	else if (io->stream == SND_PCM_STREAM_CAPTURE)
		snd_pcm_areas_silence(areas, offset, io->channels, size, io->format);
	return size; /* playback: into nothing */
}

static int paced_poll_revents(snd_pcm_ioplug_t *io, struct pollfd *pfd, unsigned int nfds, unsigned short *revents) {
	paced_t *p = io->private_data;
	uint64_t ticks;
	*revents = 0;
	if (nfds != 1)
		return -EINVAL;
	if (pfd[0].revents & POLLIN) {
		if (read(p->timer, &ticks, sizeof(ticks)) < 0 && errno != EAGAIN)
			return -errno;
		*revents = io->stream == SND_PCM_STREAM_PLAYBACK ? POLLOUT : POLLIN;
		if (!p->running && io->stream == SND_PCM_STREAM_PLAYBACK)
			return arm_now(p); /* still filling before the start */
	}
	return 0;
}

/* paced_free closes what p holds and frees it. */
static void paced_free(paced_t *p) {
	if (p->timer >= 0)
		close(p->timer);
	if (p->talk_fd >= 0)
		close(p->talk_fd);
	free(p);
}

static int paced_close(snd_pcm_ioplug_t *io) {
	paced_free(io->private_data);
	return 0;
}

static const snd_pcm_ioplug_callback_t paced_ops = {
	.start = paced_start,
	.prepare = paced_prepare,
	.hw_params = paced_hw_params,
	.stop = paced_stop,
	.pointer = paced_pointer,
	.transfer = paced_transfer,
	.poll_revents = paced_poll_revents,
	.close = paced_close,
};

SND_PCM_PLUGIN_DEFINE_FUNC(paced) {
	snd_config_iterator_t i, next;
	const char *capture = NULL;
	snd_config_for_each(i, next, conf) {
		snd_config_t *n = snd_config_iterator_entry(i);
		const char *id;
		if (snd_config_get_id(n, &id) < 0)
			continue;
		if (strcmp(id, "comment") == 0 || strcmp(id, "type") == 0 || strcmp(id, "hint") == 0)
			continue;
		if (strcmp(id, "capture") == 0 && snd_config_get_string(n, &capture) == 0)
			continue;
		SNDERR("paced: unknown field %s", id);
		return -EINVAL;
	}
	paced_t *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->timer = p->talk_fd = -1;
	if (capture && stream == SND_PCM_STREAM_CAPTURE) {
		int err = open_talk(p, capture);
		if (err < 0) {
			SNDERR("paced: capture file %s: %s", capture, snd_strerror(err));
			paced_free(p);
			return err;
		}
	}
	p->timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (p->timer < 0) {
		int err = -errno;
		paced_free(p);
		return err;
	}
	p->io.version = SND_PCM_IOPLUG_VERSION;
	p->io.name = "omnisat paced test card";
	p->io.callback = &paced_ops;
	p->io.private_data = p;
	p->io.mmap_rw = 0;
	p->io.poll_fd = p->timer;
	p->io.poll_events = POLLIN;
	int err = snd_pcm_ioplug_create(&p->io, name, stream, mode);
	if (err < 0) {
		paced_free(p);
		return err;
	}
	static const unsigned int access[] = {SND_PCM_ACCESS_RW_INTERLEAVED};
	static const unsigned int formats[] = {SND_PCM_FORMAT_S16_LE, SND_PCM_FORMAT_S32_LE, SND_PCM_FORMAT_FLOAT_LE};
	if ((err = snd_pcm_ioplug_set_param_list(&p->io, SND_PCM_IOPLUG_HW_ACCESS, 1, access)) < 0 ||
		(err = snd_pcm_ioplug_set_param_list(&p->io, SND_PCM_IOPLUG_HW_FORMAT, 3, formats)) < 0 ||
		(err = snd_pcm_ioplug_set_param_minmax(&p->io, SND_PCM_IOPLUG_HW_CHANNELS, 1, 2)) < 0 ||
		(err = snd_pcm_ioplug_set_param_minmax(&p->io, SND_PCM_IOPLUG_HW_RATE, 48000, 48000)) < 0 ||
		(err = snd_pcm_ioplug_set_param_minmax(&p->io, SND_PCM_IOPLUG_HW_PERIOD_BYTES, 64, 1 << 20)) < 0 ||
		(err = snd_pcm_ioplug_set_param_minmax(&p->io, SND_PCM_IOPLUG_HW_PERIODS, 2, 64)) < 0) {
		snd_pcm_ioplug_delete(&p->io);
		return err;
	}
	*pcmp = p->io.pcm;
	return 0;
}

SND_PCM_PLUGIN_SYMBOL(paced);
