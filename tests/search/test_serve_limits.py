"""`pcmr serve` under hostile clients: an oversized upload is refused while it is read (the server pulls
no more than the cap from the connection), an image's pixel count is refused from its header before
decoding, decoding never holds the search lock, half-sent and idle connections are closed, and the
access log escapes what the client sent."""

from __future__ import annotations

import asyncio
import io
import socket
import threading
import time

import numpy as np
import pytest
import uvicorn
from fastapi.testclient import TestClient
from PIL import Image

import pcmr.search.uploads as uploads
from pcmr.search import GalleryIndex
from pcmr.search.server import server_config
from pcmr.search.service import FORM_OVERHEAD_BYTES, ServiceLimits, create_app, log_safe

CAP = 100_000
BOUNDARY = "pcmrboundary"


@pytest.fixture(scope="module")
def index(search_index_factory, tmp_path_factory):
    return GalleryIndex.load(search_index_factory(tmp_path_factory.mktemp("limits"), backend="exact"))


def _png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("L", (width, height)).save(buffer, format="PNG")
    return buffer.getvalue()


def _upload(app, chunks, headers: list[tuple[bytes, bytes]]) -> tuple[int, int]:
    """POST /api/search/image straight through ASGI with a body delivered chunk by chunk; returns the
    status and the number of body bytes the application pulled."""
    pulled = 0
    status = 0
    source = iter(chunks)

    async def receive():
        nonlocal pulled
        chunk = next(source, None)
        if chunk is None:
            return {"type": "http.request", "body": b"", "more_body": False}
        pulled += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": True}

    async def send(message):
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/api/search/image", "raw_path": b"/api/search/image", "query_string": b"k=3",
             "root_path": "", "headers": [(b"content-type", f"multipart/form-data; boundary={BOUNDARY}".encode()),
                                          *headers], "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    asyncio.run(app(scope, receive, send))
    return status, pulled


def _endless_form(chunk_size: int = 65_536, total: int = 400 * 2**20):
    yield (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.png\"\r\n"
           "Content-Type: image/png\r\n\r\n").encode()
    for _ in range(total // chunk_size):
        yield b"\0" * chunk_size


def test_an_oversized_upload_is_refused_while_it_is_read(index):
    app = create_app(index, limits=ServiceLimits(max_upload_bytes=CAP))
    status, pulled = _upload(app, _endless_form(), [])  # chunked: no declared length
    assert status == 413
    assert pulled <= CAP + FORM_OVERHEAD_BYTES + 65_536  # at most one chunk past the cap, never the 400 MiB
    status, pulled = _upload(app, _endless_form(), [(b"content-length", str(400 * 2**20).encode())])
    assert status == 413 and pulled == 0  # a declared length above the cap: nothing is read


def test_an_upload_within_the_cap_is_searched(index):
    client = TestClient(create_app(index, limits=ServiceLimits(max_upload_bytes=CAP)), raise_server_exceptions=False)
    response = client.post("/api/search/image", params={"k": 3}, files={"file": ("q.png", _png(16, 16), "image/png")})
    assert response.status_code == 200 and len(response.json()["results"]) == 3


def test_pixels_are_counted_from_the_header_before_decoding(index, monkeypatch):
    decoded = []
    monkeypatch.setattr(uploads, "pil_to_pixels", lambda image, size: decoded.append(image.size))
    client = TestClient(create_app(index, limits=ServiceLimits(max_image_pixels=1_000_000)),
                        raise_server_exceptions=False)
    data = _png(2000, 1000)  # 2 megapixels in a few kilobytes
    assert len(data) < 20_000
    response = client.post("/api/search/image", files={"file": ("wide.png", data, "image/png")})
    assert response.status_code == 413
    assert response.json()["error"] == ("the uploaded image has 2000 x 1000 = 2,000,000 pixels; this server decodes "
                                        "at most 1,000,000")
    assert decoded == []


def test_decoding_an_upload_does_not_hold_the_search_lock(index, monkeypatch):
    """An upload whose decoding is held up must not delay a text search: the search finishes while the
    decoding still waits (were decoding under the lock, the search would wait for it)."""
    release = threading.Event()
    order = []
    real = uploads.pil_to_pixels

    def slow_decode(image, size):
        order.append("decoding")
        release.wait(60)
        order.append("decoded")
        return real(image, size)

    monkeypatch.setattr(uploads, "pil_to_pixels", slow_decode)
    client = TestClient(create_app(index), raise_server_exceptions=False)
    upload = threading.Thread(target=lambda: order.append(client.post(
        "/api/search/image", files={"file": ("q.png", _png(16, 16), "image/png")}).status_code))
    upload.start()
    for _ in range(600):
        if order:
            break
        time.sleep(0.05)
    assert order == ["decoding"]
    assert client.get("/api/search", params={"text": "a red circle", "k": 3}).status_code == 200
    order.append("text search answered")
    release.set()
    upload.join(60)
    assert order == ["decoding", "text search answered", "decoded", 200]


@pytest.fixture(scope="module")
def live_server(index):
    """A real uvicorn server (the protocol of `pcmr serve`) with a 1-second request deadline."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    limits = ServiceLimits(request_timeout_s=1.0, idle_timeout_s=1.0)
    server = uvicorn.Server(server_config(create_app(index, limits=limits), limits, log_level="warning",
                                          access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(600):
        if server.started:
            break
        time.sleep(0.05)
    yield sock.getsockname()[1]
    server.should_exit = True
    thread.join(30)
    sock.close()


def _closed_by_server(port: int, sent: bytes) -> bytes:
    """Send ``sent`` and then nothing; return what the server sent before closing (within 60 s)."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
        if sent:
            conn.sendall(sent)
        received = b""
        while True:
            chunk = conn.recv(65_536)  # socket.timeout here means the connection was held
            if not chunk:
                return received
            received += chunk


@pytest.mark.parametrize("sent", [
    b"",  # connected, silent
    b"GET /api/health HTTP/1.1\r\nHost: x\r\n",  # headers never finished
    b"POST /api/search/image HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc",  # body never finished
])
def test_silent_and_half_sent_connections_are_closed(live_server, sent):
    assert _closed_by_server(live_server, sent) == b""


def test_a_kept_alive_connection_is_closed_when_idle_and_requests_still_work(live_server):
    received = _closed_by_server(live_server, b"GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert received.startswith(b"HTTP/1.1 200") and b'"status":"ok"' in received


def test_the_access_log_escapes_what_the_client_sent(index):
    stream = io.StringIO()
    client = TestClient(create_app(index, access_log=stream), raise_server_exceptions=False)
    client.get('/api/images/%0A2026-01-01T00:00:00Z 10.0.0.1 "GET /admin" 200')
    client.get("/api/search", params={"text": "a\nb\x1b[31m", "k": 2})
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2  # one line per request, whatever the request held
    assert '"GET /api/images/%0A2026-01-01T00:00:00Z%2010.0.0.1%20%22GET%20/admin%22%20200" 404 ' in lines[0]
    assert "?text=a%0Ab%1B%5B31m&k=2" in lines[1]
    assert log_safe('a\nb"c\\d\x1b\x7f\u2028') == 'a\\nb\\"c\\\\d\\x1b\\x7f\\u2028'


def test_an_accepted_upload_is_never_written_to_disk(index, monkeypatch):
    import starlette.formparsers as formparsers

    rolled = []

    class Recording(formparsers.SpooledTemporaryFile):
        def rollover(self):
            rolled.append(self._max_size)
            super().rollover()

    monkeypatch.setattr(formparsers, "SpooledTemporaryFile", Recording)
    pixels = np.random.default_rng(0).integers(0, 256, (1000, 1000, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG", compress_level=0)
    assert len(buffer.getvalue()) > 2 * 2**20  # above starlette's 1 MiB in-memory spool
    client = TestClient(create_app(index), raise_server_exceptions=False)
    response = client.post("/api/search/image", files={"file": ("noise.png", buffer.getvalue(), "image/png")})
    assert response.status_code == 200 and rolled == []
