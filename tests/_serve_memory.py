"""Memory of ``pcmr serve`` under concurrent near-cap uploads, measured in a process of its own (used by
tests/search/test_serve_safety.py): ``python tests/_serve_memory.py INDEX SIDE UPLOADS SLOTS DECODE_PIXELS``
serves INDEX with uvicorn, sends UPLOADS PNGs of SIDE x SIDE pixels at once (the cap is SIDE x SIDE) and
prints one JSON line: the HTTP statuses, the peak resident memory above the warmed-up server's and what
stays held once they are answered (MiB), and the most pixels the decode budget had in flight."""

from __future__ import annotations

import http.client
import io
import json
import os
import socket
import sys
import threading
import time

BOUNDARY = "pcmrmemory"


def rss_mib() -> float:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def upload(port: int, body: bytes, statuses: list[int]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("POST", "/api/search/image?k=3", body=body,
                 headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})
    statuses.append(conn.getresponse().status)
    conn.close()


def main(index_dir: str, side: int, uploads: int, slots: int, decode_pixels: int) -> None:
    import uvicorn
    from PIL import Image

    from pcmr.search import GalleryIndex
    from pcmr.search.server import server_config
    from pcmr.search.service import ServiceLimits, create_app

    buffer = io.BytesIO()
    Image.new("L", (side, side)).save(buffer, format="PNG")
    body = (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.png\"\r\n"
            f"Content-Type: image/png\r\n\r\n").encode() + buffer.getvalue() + f"\r\n--{BOUNDARY}--\r\n".encode()
    limits = ServiceLimits(max_image_pixels=side * side, max_concurrent_decodes=slots, max_decode_pixels=decode_pixels,
                           request_timeout_s=300)
    app = create_app(GalleryIndex.load(index_dir), limits=limits)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(server_config(app, limits, log_level="warning", access_log=False))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    port = sock.getsockname()[1]
    warm: list[int] = []
    for _ in range(2):  # the first answers allocate the search's own buffers
        upload(port, body, warm)
    baseline = rss_mib()
    peak = [baseline]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_mib())
            time.sleep(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    statuses: list[int] = []
    clients = [threading.Thread(target=upload, args=(port, body, statuses)) for _ in range(uploads)]
    for client in clients:
        client.start()
    for client in clients:
        client.join()
    time.sleep(0.2)
    done.set()
    sampler.join()
    held = rss_mib()
    for _ in range(30):  # what stays held once the answers are out: the least over 3 s (a loaded machine may
        time.sleep(0.1)  # run the last request's clean-up a little after its answer)
        held = min(held, rss_mib())
    print(json.dumps({"statuses": warm + statuses, "peak_mib": round(peak[0] - baseline, 1),
                      "held_mib": round(held - baseline, 1),
                      "peak_in_flight": app.state.decoding.peak_in_flight}))
    server.should_exit = True


if __name__ == "__main__":
    main(sys.argv[1], *(int(arg) for arg in sys.argv[2:]))
