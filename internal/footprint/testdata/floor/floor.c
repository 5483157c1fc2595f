/*
 * floor: the least any audio client pays for the streaming job BenchmarkFootprint measures,
 * the work no implementation can skip. Once a second it wakes from a timer, base64-encodes a
 * second of 16 kHz float32 audio (64,000 bytes) and sends it over TCP to 127.0.0.1:PORT, for
 * SECONDS seconds. It does not frame, mask, read answers or decode replies: a real client pays
 * those on top.
 *
 *	floor PORT SECONDS
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static size_t encode(const unsigned char *in, size_t n, char *out)
{
	size_t o = 0;
	for (size_t i = 0; i + 2 < n; i += 3) { /* n is a multiple of 3 here */
		uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
		out[o++] = alphabet[v >> 18];
		out[o++] = alphabet[(v >> 12) & 63];
		out[o++] = alphabet[(v >> 6) & 63];
		out[o++] = alphabet[v & 63];
	}
	return o;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: floor PORT SECONDS\n");
		return 2;
	}
	static unsigned char audio[64002]; /* one second, padded to whole 3-byte groups */
	static char out[85336];
	for (size_t i = 0; i < sizeof audio; i++)
		audio[i] = (unsigned char)(i * 7);

	int sock = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1])),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (sock < 0 || connect(sock, (struct sockaddr *)&addr, sizeof addr) != 0) {
		perror("floor: connect");
		return 1;
	}
	int timer = timerfd_create(CLOCK_MONOTONIC, 0);
	struct itimerspec every = {.it_interval = {1, 0}, .it_value = {1, 0}};
	if (timer < 0 || timerfd_settime(timer, 0, &every, NULL) != 0) {
		perror("floor: timerfd");
		return 1;
	}
	for (int s = atoi(argv[2]); s > 0; s--) {
		uint64_t expirations;
		if (read(timer, &expirations, sizeof expirations) != sizeof expirations) {
			perror("floor: read timer");
			return 1;
		}
		size_t n = encode(audio, sizeof audio, out);
		for (size_t sent = 0; sent < n;) {
			ssize_t k = send(sock, out + sent, n - sent, MSG_NOSIGNAL);
			if (k <= 0) {
				perror("floor: send");
				return 1;
			}
			sent += (size_t)k;
		}
	}
	return 0;
}
