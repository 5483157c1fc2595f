#!/usr/bin/env bash
# The newcomer's demo: start the built-in model server simulator and talk to it with the real
# client, in all three dialects, then show what a busy server looks like. Everything stays on
# loopback; the processes started here are stopped by pid on exit.
set -euo pipefail
bin="${1:-bin/omnisat}"
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# start_sim NAME ARGS...: runs `omnisat simulate` on a free port and sets $url once it listens.
start_sim() {
	local name=$1; shift
	"$bin" simulate --listen 127.0.0.1:0 "$@" >"$work/$name.out" 2>"$work/$name.log" &
	pids+=($!)
	for _ in $(seq 100); do
		url=$(grep -o 'ws://[^ ]*' "$work/$name.out" 2>/dev/null | head -1 || true)
		[ -n "$url" ] && return 0
		sleep 0.05
	done
	echo "demo: the $name simulator did not start:" >&2
	cat "$work/$name.log" >&2
	exit 1
}

say() { printf '\n\033[1m%s\033[0m\n$ %s\n' "$1" "$2"; }

say "1. The agent: omnisat run with the built-in simulator as the model server. It uses this machine's
   microphone, speaker and camera if it has them, else a looping WAV file and a folder of JPEGs
   (the first line says which). It streams 1 s chunks with a frame each, and the simulator's
   parrot answers what it heard and saw." \
	"omnisat run --simulator -c configs/demo/demo.yaml --state-dir \$STATE"
"$bin" run --simulator -c configs/demo/demo.yaml --state-dir "$work/state" &
agent=$!
pids+=($agent)
sleep 12
say "   ...and is driven through its control socket (as kiosk scripts and GPIO buttons do):" \
	"omnisat ctl --socket \$STATE/control.sock ask --snapshot \"Reply with exactly: I see the test pattern\""
"$bin" ctl --socket "$work/state/control.sock" ask --snapshot "Reply with exactly: I see the test pattern"
printf '$ omnisat ctl status\n'
"$bin" ctl --socket "$work/state/control.sock" status
kill -INT "$agent"
wait "$agent" 2>/dev/null || true

start_sim current --dialect current
say "2. A streamed chat turn against the MiniCPM-o simulator (current dialect)" \
	"omnisat chat --server $url \"Reply with exactly: Hello from the omnisat simulator\""
"$bin" chat --server "$url" "Reply with exactly: Hello from the omnisat simulator"

say "3. The same with speech: the reply's 24 kHz audio is saved as a WAV file" \
	"omnisat chat --server $url --tts-out reply.wav \"Reply with exactly: this reply is also spoken\""
"$bin" chat --server "$url" --tts-out "$work/reply.wav" "Reply with exactly: this reply is also spoken"
if command -v soxi >/dev/null; then soxi "$work/reply.wav" | grep -E 'Sample Rate|Duration'; fi

ffmpeg -loglevel error -f lavfi -i testsrc=size=320x240 -frames:v 1 "$work/picture.jpg"
say "4. A question with a picture (the simulator echoes the text and checks the JPEG decodes)" \
	"omnisat chat --server $url --image picture.jpg \"What is in this picture?\""
"$bin" chat --server "$url" --image "$work/picture.jpg" "What is in this picture?"

start_sim openvoice --dialect openvoice
say "5. Text to speech on the Macaw OpenVoice simulator" \
	"omnisat chat --dialect openvoice --model whisper --server $url --tts-out speech.wav \"Good morning\""
"$bin" chat --dialect openvoice --model whisper --server "$url" --tts-out "$work/speech.wav" "Good morning"

start_sim busy --fault refuse
say "6. A busy server: the client says what happened and exits 1 (try again later)" \
	"omnisat chat --server $url \"hello\""
set +e
"$bin" chat --server "$url" "hello"
code=$?
set -e
echo "exit code $code"

start_sim legacy --dialect legacy
say "7. The wrong dialect: a legacy gateway has no chat mode (exit 2: fix the command)" \
	"omnisat chat --dialect legacy --server $url \"hello\""
set +e
"$bin" chat --dialect legacy --server "$url" "hello"
echo "exit code $?"
set -e

printf '\nThe simulator is yours to try: %s simulate --help\n' "$bin"
