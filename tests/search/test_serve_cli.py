"""`pcmr serve` as a user runs it: the port is bound before "serving ... on http://..." is printed, a busy
port is one plain error (exit 2), every request writes an access-log line, and the JSON API carries the
readable-search fields (merged captions, uncertainty percentile, warnings) and plain upload errors."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from pcmr.cli import main
from pcmr.search import GalleryIndex
from pcmr.search.service import create_app


@pytest.fixture(scope="module")
def index_dir(search_index_factory, tmp_path_factory):
    return search_index_factory(tmp_path_factory.mktemp("serve-cli"), backend="exact")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_busy_port_is_one_error_and_nothing_claims_to_serve(index_dir, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert main(["serve", str(index_dir), "--port", str(port)]) == 2
    captured = capsys.readouterr()
    assert "serving" not in captured.out
    assert captured.err == (f"pcmr serve: error: port {port} on 127.0.0.1 is already in use (another pcmr serve, "
                            f"or another program); choose another with --port\n")


def test_serve_prints_after_binding_and_logs_each_request(index_dir, tmp_path):
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"), "OMP_NUM_THREADS": "1"}
    log = tmp_path / "stderr.txt"
    with open(log, "w") as err:
        process = subprocess.Popen([sys.executable, "-m", "pcmr", "serve", str(index_dir), "--port", str(port),
                                    "--request-timeout", "1"],
                                   stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    try:
        line = process.stdout.readline()
        assert line.startswith(f"serving {index_dir} (13 images, 65 captions) on http://127.0.0.1:{port}/")
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # the port is held as soon as the line is printed
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=10) as response:
                    assert response.status == 200
                    assert json.loads(response.read())["similarity"] == "match_prob"  # as the model was trained
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        deadline = time.monotonic() + 10
        while '"GET /api/health" 200' not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert '127.0.0.1 "GET /api/health" 200 ' in log.read_text()
        with socket.create_connection(("127.0.0.1", port), timeout=60) as silent:  # half-sent headers
            silent.sendall(b"GET /api/health HTTP/1.1\r\n")
            assert silent.recv(1024) == b""  # closed by --request-timeout (a socket.timeout: held)
    finally:
        process.terminate()
        process.wait(timeout=30)
        process.stdout.close()


def test_access_log_line_per_request(index_dir):
    stream = io.StringIO()
    client = TestClient(create_app(GalleryIndex.load(index_dir), access_log=stream), raise_server_exceptions=False)
    client.get("/api/search", params={"text": "a red circle", "k": 3})
    client.get("/api/images/99")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    assert '"GET /api/search?text=a+red+circle&k=3" 200 ' in lines[0] and lines[0].endswith(" ms")
    assert '"GET /api/images/99" 404 ' in lines[1]


def test_api_merges_captions_gives_percentiles_and_warnings(index_dir):
    index = GalleryIndex.load(index_dir)
    client = TestClient(create_app(index), raise_server_exceptions=False)
    body = client.get("/api/search", params={"text": "zzzz qqqq", "k": 3}).json()
    assert any("no word of the query 'zzzz qqqq'" in w for w in body["warnings"])
    for hit in body["results"]:
        assert 0 <= hit["uncertainty_percentile"] <= 100 and isinstance(hit["uncertainty"], float)
    assert client.get("/api/search", params={"text": "a red circle", "k": 3}).json()["warnings"] == []
    item = client.get("/api/images/0", params={"k": 10}).json()
    texts = [c["text"] for c in item["captions"]]
    assert len(texts) == len(set(texts)) == 10
    assert sum(c["count"] for c in item["captions"]) >= 10


def test_bad_upload_error_is_plain_words(index_dir):
    client = TestClient(create_app(GalleryIndex.load(index_dir)), raise_server_exceptions=False)
    response = client.post("/api/search/image", files={"file": ("a.txt", b"not an image", "text/plain")})
    assert response.status_code == 415
    message = response.json()["error"]
    assert message == ("the uploaded file is not an image this server can read; upload a PNG, JPEG, GIF, BMP or "
                       "WebP file")
    assert "<" not in message and "0x" not in message


def test_validation_errors_are_plain(index_dir):
    client = TestClient(create_app(GalleryIndex.load(index_dir)), raise_server_exceptions=False)
    response = client.get("/api/search", params={"text": "a red circle", "k": "ten"})
    assert response.status_code == 422
    assert response.json()["error"] == "k: input should be a valid integer, unable to parse string as an integer " \
                                       "(got 'ten')"
    missing = client.post("/api/search/image").json()["error"]
    assert missing.startswith("file: field required") and "body." not in missing
