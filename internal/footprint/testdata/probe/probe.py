"""A Python streaming client measured beside omnisat (BenchmarkFootprint's python_probe row).

It streams as the MiniCPM-o project's examples/realtime/audio_probe.py does: asyncio and the
websockets library, json per message, base64 per chunk, numpy for the samples, one 1 s chunk a
second, the WAV looped; reply audio is decoded and dropped. Issue 15's CPU goal is a fifth of
that probe's figure, so the row gives the comparison on the same machine in the same hour.

    python3 probe.py ws://HOST:PORT/v1/realtime?mode=audio file.wav seconds
"""
import asyncio
import base64
import json
import sys
import time
import wave

import numpy as np
import websockets

RATE = 16000


def load(path):
    """The WAV as 16 kHz mono float32, padded to whole chunks with three seconds of silence."""
    with wave.open(path, "rb") as wf:
        channels, rate = wf.getnchannels(), wf.getframerate()
        frames = wf.readframes(wf.getnframes())
    samples = np.frombuffer(frames, dtype="<i2").astype(np.float32) / 32768.0
    if channels > 1:
        samples = samples.reshape(-1, channels).mean(axis=1)
    if rate != RATE:
        n = int(round(len(samples) * RATE / rate))
        old = np.linspace(0, 1, num=len(samples), endpoint=False)
        samples = np.interp(np.linspace(0, 1, num=n, endpoint=False), old, samples)
    samples = np.clip(samples, -1, 1).astype(np.float32)
    pad = 3 * RATE + (-len(samples)) % RATE
    return np.concatenate([samples, np.zeros(pad, dtype=np.float32)])


async def send_chunks(ws, chunks, stop):
    due = time.perf_counter()
    i = 0
    while not stop.is_set():
        chunk = chunks[i % len(chunks)]
        i += 1
        wait = due - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        audio = base64.b64encode(chunk.astype("<f4").tobytes()).decode("ascii")
        await ws.send(json.dumps({"type": "input.append",
                                  "input": {"audio": audio, "force_listen": False}}))
        due += 1.0


async def main(url, wav, seconds):
    samples = load(wav)
    chunks = [samples[i:i + RATE] for i in range(0, len(samples), RATE)]
    async with websockets.connect(url, max_size=128 << 20, open_timeout=10) as ws:
        stop = asyncio.Event()
        sender = None
        end = time.perf_counter() + seconds
        while True:
            try:
                raw = await asyncio.wait_for(ws.recv(), timeout=max(0.1, end - time.perf_counter()))
            except asyncio.TimeoutError:
                break
            msg = json.loads(raw)
            kind = msg.get("type", "")
            if kind == "session.queue_done":
                await ws.send(json.dumps({"type": "session.init",
                                          "payload": {"system_prompt": "footprint probe"}}))
            elif kind == "session.created" and sender is None:
                sender = asyncio.create_task(send_chunks(ws, chunks, stop))
            elif kind == "response.output.delta" and msg.get("kind") == "audio" and msg.get("audio"):
                np.frombuffer(base64.b64decode(msg["audio"]), dtype="<f4")
            elif kind == "session.closed":
                break
        stop.set()
        if sender is not None:
            await asyncio.wait_for(sender, 2.0)
        await ws.send(json.dumps({"type": "session.close", "reason": "user_stop"}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
