/*
 * floor: the least any audio client pays for the streaming job BenchmarkFootprint measures,
 * the work no implementation can skip. Once a second it wakes from a timer, base64-encodes a
 * second of 16 kHz float32 audio (64,000 bytes) and sends it over TCP to 127.0.0.1:PORT, for
 * SECONDS seconds. It does not frame or mask, and without "answers" it reads nothing back.
 *
 * With "answers" it also reads what the server says back after each second it sends, as a
 * client must: the sink of BenchmarkFootprint's floor_answers row answers each second with one
 * message, a 4-byte big-endian length and that many bytes, a few milliseconds later (as the
 * simulator answers a chunk), so that the floor wakes a second time to read it. It reads the
 * message as a WebSocket client reads a frame, a small read for the header and then the rest
 * into its buffer, and decodes nothing: what it costs is the second wake-up and the bytes.
 *
 * With "code=N" it also runs, each second, N functions of one instruction, each on a 4 KiB page
 * of code of its own (N ≤ 1024): what a client whose work of a second runs through N pages of
 * code pays for that code alone, when it comes back to it a second later. The floor's own code
 * fits in a few pages; a real client's runs through hundreds.
 *
 *	floor PORT SECONDS [answers] [code=N]
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

/* code_pages: CODE_PAGES functions that only return, one at the start of each 4 KiB page. */
#define CODE_PAGES 1024
#define STRING(x) #x
#define EXPANDED_STRING(x) STRING(x)
__asm__(".text\n"
	".balign 4096\n"
	"code_pages:\n"
	".rept " EXPANDED_STRING(CODE_PAGES) "\n"
	"ret\n"
	".balign 4096\n"
	".endr\n");
extern const char code_pages[] __asm__("code_pages");

static void run_code_pages(int n)
{
	for (int i = 0; i < n; i++)
		((void (*)(void))(code_pages + (size_t)i * 4096))();
}

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

/* read_answer reads one answer (a 4-byte big-endian length, then that many bytes): a read of
 * up to 4096 bytes for its start, as a WebSocket client's buffered reader reads a frame's
 * header, then the rest straight into the buffer. */
static int read_answer(int sock)
{
	static unsigned char answer[1 << 20];
	size_t have = 0, want = 4;
	for (size_t room = 4096; have < want; room = want - have) {
		ssize_t k = read(sock, answer + have, room);
		if (k <= 0) {
			perror("floor: read answer");
			return 1;
		}
		have += (size_t)k;
		if (want == 4 && have >= 4) {
			want += (size_t)answer[0] << 24 | (size_t)answer[1] << 16 | (size_t)answer[2] << 8 | answer[3];
			if (want > sizeof answer || have > want) {
				fprintf(stderr, "floor: answer of %zu bytes, or more than one\n", want);
				return 1;
			}
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	int answers = 0, pages = 0, bad = argc < 3;
	for (int i = 3; i < argc; i++) {
		if (strcmp(argv[i], "answers") == 0)
			answers = 1;
		else if (strncmp(argv[i], "code=", 5) == 0 && (pages = atoi(argv[i] + 5)) > 0 && pages <= CODE_PAGES)
			continue;
		else
			bad = 1;
	}
	if (bad) {
		fprintf(stderr, "usage: floor PORT SECONDS [answers] [code=N], N from 1 to %d\n", CODE_PAGES);
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
		run_code_pages(pages);
		size_t n = encode(audio, sizeof audio, out);
		for (size_t sent = 0; sent < n;) {
			ssize_t k = send(sock, out + sent, n - sent, MSG_NOSIGNAL);
			if (k <= 0) {
				perror("floor: send");
				return 1;
			}
			sent += (size_t)k;
		}
		if (answers && read_answer(sock) != 0)
			return 1;
	}
	return 0;
}
