"""`pcmr serve` keeps its memory and its log honest: concurrent near-cap uploads decode within a pixel
budget and give their memory back, sizes an edited index sets are checked before anything is allocated,
and the access log names the connection's address unless a trusted proxy is configured."""

from __future__ import annotations

import hashlib
import http.client
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import uvicorn

from pcmr.search import GalleryIndex
from pcmr.search.manifest import _manifest_digest
from pcmr.search.server import server_config
from pcmr.search.service import create_app

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def index_dir(search_index_factory, tmp_path_factory):
    return search_index_factory(tmp_path_factory.mktemp("servesafety"), backend="exact")


def test_concurrent_near_cap_uploads_decode_within_a_pixel_budget_and_give_memory_back(index_dir):
    """16 uploads of 3000 x 3000 pixels (the cap) at once, in a process of their own: one decodes at a time
    (the default budget is one image at the cap), so the peak stays below three decodes' worth (about 5
    bytes per pixel) where 16 at once took about 16; what stays held afterwards is below one."""
    side = 3000
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent / "src"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(TESTS / "_serve_memory.py"), str(index_dir), str(side), "16", "2",
                           str(side * side)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    decode_mib = side * side * 5.5 / 2**20
    assert measured["statuses"] == [200] * 18
    assert measured["peak_in_flight"] == side * side  # never two near-cap images decoding at once
    assert measured["peak_mib"] < 3 * decode_mib, measured
    assert measured["held_mib"] < decode_mib, measured


def _edit_size(folder: Path, value) -> None:
    """Set ``image_size`` of the index's model/preprocessor_config.json, its checksum and the manifest's
    digest recomputed (plain hashes: anyone who can write the index can)."""
    pre = folder / "model" / "preprocessor_config.json"
    config = json.loads(pre.read_text())
    config["image_size"] = value
    pre.write_text(json.dumps(config))
    info = json.loads((folder / "index.json").read_text())
    info["checksums"]["model/preprocessor_config.json"] = hashlib.sha256(pre.read_bytes()).hexdigest()
    info["manifest_sha256"] = _manifest_digest(info)
    (folder / "index.json").write_text(json.dumps(info))


@pytest.mark.parametrize(("value", "message"), [
    (8192, "image_size must be an integer side in pixels from 1 to 1024, got 8192"),
    (0, "image_size must be an integer side in pixels from 1 to 1024, got 0"),
    ("64", "image_size must be an integer side in pixels from 1 to 1024, got '64'"),
    ("TRAINED+1", "differs from the image_size TRAINED the model was trained at"),
])
def test_an_image_size_edited_in_an_index_is_refused_before_anything_is_allocated(index_dir, tmp_path, value,
                                                                                   message):
    trained = GalleryIndex.load(index_dir).model.image_size
    folder = tmp_path / "index"
    shutil.copytree(index_dir, folder)
    _edit_size(folder, trained + 1 if value == "TRAINED+1" else value)
    with pytest.raises(ValueError) as caught:
        GalleryIndex.load(folder)
    assert str(caught.value).startswith(str(folder / "model" / "preprocessor_config.json"))
    assert message.replace("TRAINED", str(trained)) in str(caught.value)


def _logged_address(index: GalleryIndex, **settings) -> str:
    """Serve ``index`` with uvicorn as `pcmr serve` does, send one request claiming `X-Forwarded-For:
    6.6.6.6` and return the address of its access-log line."""
    log = io.StringIO()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    server = uvicorn.Server(server_config(create_app(index, access_log=log), log_level="warning", access_log=False,
                                          **settings))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", sock.getsockname()[1], timeout=60)
        conn.request("GET", "/api/health", headers={"X-Forwarded-For": "6.6.6.6"})
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
    return log.getvalue().split()[1]


def test_the_access_log_names_the_peer_unless_a_proxy_is_trusted(index_dir):
    index = GalleryIndex.load(index_dir)
    assert _logged_address(index) == "127.0.0.1"  # uvicorn alone would log 6.6.6.6 from a local client
    assert _logged_address(index, trusted_proxy="10.0.0.1") == "127.0.0.1"  # another proxy: not trusted
    assert _logged_address(index, trusted_proxy="127.0.0.1") == "6.6.6.6"
