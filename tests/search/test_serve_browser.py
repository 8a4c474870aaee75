"""The `pcmr serve` page in a real browser: Debian's chromium, headless, driven by selenium through
/usr/bin/chromedriver (no driver download). Run by `make test-browser` (which `.ci/run` calls after
installing chromium and chromium-driver); a missing browser is a failure, never a skip.

The pages: a tiny shapes index (query, grid, detail pane, shared links, legend, upload), and an index of
one's own image folder served with ``--images`` (file names, written captions, the image files)."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from contextlib import contextmanager

import pytest

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]


def _require_browser() -> None:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not (os.path.isfile(path) and os.access(path, os.X_OK))]
    if missing:
        pytest.fail(f"the browser test needs {missing}: apt-get install chromium chromium-driver "
                    "(.ci/run installs them)", pytrace=False)


@contextmanager
def _serve(app):
    """Serve ``app`` on a free port of 127.0.0.1 in a thread, as ``pcmr serve`` does (:func:`server_config`);
    yields the page's address and stops the server afterwards."""
    import uvicorn

    from pcmr.search.server import server_config

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    instance = uvicorn.Server(server_config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=instance.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not instance.started:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail("uvicorn did not start", pytrace=False)
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    instance.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def server(search_index_factory, tmp_path_factory):
    from pcmr.search import GalleryIndex
    from pcmr.search.service import create_app

    index = GalleryIndex.load(search_index_factory(tmp_path_factory.mktemp("browser")))
    with _serve(create_app(index)) as url:
        yield url, index


#: a one-step training of a tiny model on an own image folder (the page needs an index, not accuracy)
OWN_TRAINING = ["--no-progress", "--set", "data.batch_size=8", "--set", "train.epochs=1",
                "--set", "train.max_steps_per_epoch=1", "--set", "model.embed_dim=8",
                "--set", "model.text_encoder={word_dim: 8, hidden_dim: 8}",
                "--set", "model.image_encoder={cnn_channels: [4, 4, 4, 4]}"]


@pytest.fixture(scope="module")
def own_server(tmp_path_factory):
    """``pcmr serve INDEX --images FOLDER`` on an index of one's own image folder (20 PNG files with two
    captions each in ``captions.csv``, some in a subfolder), built as the README's quickstart does. The
    folder is moved after the build, so images load only from the folder given to the server, never from
    the one the index records. Yields the address, the index and the captions written for each file."""
    from tests._own_data import make_folder, samples

    from pcmr.cli import main
    from pcmr.search import GalleryIndex
    from pcmr.search.service import create_app

    root = tmp_path_factory.mktemp("own-browser")
    built = make_folder(root / "myphotos", 20)
    assert main(["train", "pcme", "--data", str(built), "--out", str(root / "runs"), "--name", "myphotos",
                 *OWN_TRAINING]) == 0
    assert main(["search", str(root / "index"), "--build", str(root / "runs" / "myphotos"), "--data", str(built),
                 "--backend", "faiss", "--index-type", "flat", "--ann-score", "cosine"]) == 0
    served = built.rename(root / "moved")
    index = GalleryIndex.load(root / "index")
    written = {name: (pixels.shape, captions) for name, pixels, captions in samples(20)}
    with _serve(create_app(index, image_folder=served)) as url:  # as pcmr serve INDEX --images moved
        yield url, index, written


@pytest.fixture
def browser(tmp_path):
    _require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS + [f"--user-data-dir={tmp_path / 'profile'}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)


def test_page_query_shows_the_result_grid_and_captions(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    url, index = server
    browser.get(url + "/")
    wait = WebDriverWait(browser, 30)
    wait.until(lambda d: "13 images" in d.find_element(By.ID, "status").text)
    box = browser.find_element(By.ID, "query")
    box.send_keys("a red circle on the left")
    browser.find_element(By.ID, "k").clear()
    browser.find_element(By.ID, "k").send_keys("6")
    browser.find_element(By.ID, "search-button").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#results .card")) == 6)
    cards = browser.find_elements(By.CSS_SELECTOR, "#results .card")
    expected = index.search_text("a red circle on the left", k=6, similarity="match_prob")  # the trained score
    assert [int(c.get_attribute("data-index")) for c in cards] == expected.indices[0].tolist()
    first = cards[0]
    assert first.find_element(By.CSS_SELECTOR, ".score").text == f"{float(expected.scores[0, 0]):.4f}"
    assert first.find_element(By.CSS_SELECTOR, ".bar > div").get_attribute("style").startswith("width:")
    wait.until(lambda d: d.execute_script(
        "return Array.from(document.querySelectorAll('#results img')).every(i => i.complete && i.naturalWidth > 0)"))
    first.click()
    wait.until(ec.visibility_of_element_located((By.ID, "detail")))
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#detail .caption-row")) == 5)
    rows = browser.find_elements(By.CSS_SELECTOR, "#detail .caption-row")
    nearest = index.search(index.images[int(first.get_attribute("data-index"))], k=5, modality="image",
                           similarity="match_prob")
    assert rows[0].text.startswith(f"1. {nearest.hits[0][0].text}")


def test_page_shows_the_error_of_a_bad_request(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    url, _ = server
    browser.get(url + "/")
    browser.find_element(By.ID, "query").send_keys("a red circle")
    browser.find_element(By.ID, "k").clear()
    browser.find_element(By.ID, "k").send_keys("50")
    browser.execute_script("document.getElementById('k').removeAttribute('max')")
    browser.find_element(By.ID, "search-button").click()
    WebDriverWait(browser, 30).until(lambda d: "k must be an integer" in d.find_element(By.ID, "error").text)


def _wait_ready(browser):
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 30).until(lambda d: d.execute_script("return document.body.dataset.ready === 'true'"))


def test_query_and_k_live_in_the_url_and_back_returns(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    url, index = server
    wait = WebDriverWait(browser, 30)
    browser.get(url + "/?q=a%20red%20circle&k=4")  # a shared link runs its query on load
    _wait_ready(browser)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#results .card")) == 4)
    assert browser.find_element(By.ID, "query").get_attribute("value") == "a red circle"
    expected = index.search_text("a red circle", k=4, similarity="match_prob").indices[0].tolist()
    cards = browser.find_elements(By.CSS_SELECTOR, "#results .card")
    assert [int(c.get_attribute("data-index")) for c in cards] == expected
    box = browser.find_element(By.ID, "query")
    box.clear()
    box.send_keys("a blue square")
    browser.find_element(By.ID, "k").clear()
    browser.find_element(By.ID, "k").send_keys("3")
    browser.find_element(By.ID, "search-button").click()
    wait.until(lambda d: "q=a%20blue%20square&k=3" in d.current_url)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#results .card")) == 3)
    browser.back()
    wait.until(lambda d: "q=a%20red%20circle&k=4" in d.current_url)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#results .card")) == 4)
    assert browser.find_element(By.ID, "query").get_attribute("value") == "a red circle"
    assert browser.find_element(By.ID, "k").get_attribute("value") == "4"
    cards = browser.find_elements(By.CSS_SELECTOR, "#results .card")
    assert [int(c.get_attribute("data-index")) for c in cards] == expected


def test_legend_preview_warning_and_plain_upload_error(server, browser, tmp_path):
    import numpy as np
    from PIL import Image
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    url, _ = server
    wait = WebDriverWait(browser, 30)
    browser.set_window_size(1200, 900)
    browser.get(url + "/?q=zzzz%20qqqq&k=6")
    _wait_ready(browser)
    legend = browser.find_element(By.ID, "legend")
    assert legend.is_displayed() and "percentile" in legend.text and "most uncertain" in legend.text
    import json
    import urllib.request

    with urllib.request.urlopen(url + "/api/health") as response:  # the server's words for what a score is
        note = json.loads(response.read())["score_note"]
    wait.until(lambda d: d.find_element(By.ID, "score-note").text == note)
    wait.until(lambda d: "no word of the query" in d.find_element(By.ID, "warning").text)
    bar = browser.find_element(By.CSS_SELECTOR, "#results .card .bar")
    assert "percentile of the gallery" in bar.get_attribute("title")
    picture = tmp_path / "query.png"
    Image.fromarray(np.full((16, 16, 3), 200, dtype=np.uint8)).save(picture)
    browser.find_element(By.ID, "image-file").send_keys(str(picture))
    preview = browser.find_element(By.ID, "upload-preview")
    wait.until(lambda d: preview.is_displayed() and d.execute_script(
        "const i = document.getElementById('upload-preview'); return i.complete && i.naturalWidth === 16"))
    screenshot = os.environ.get("PCMR_SCREENSHOT")
    if screenshot:
        browser.save_screenshot(screenshot)
    not_image = tmp_path / "notes.png"
    not_image.write_text("this is text")
    browser.find_element(By.ID, "image-file").send_keys(str(not_image))
    browser.find_element(By.CSS_SELECTOR, "#image-form button").click()
    wait.until(lambda d: d.find_element(By.ID, "error").text)
    error = browser.find_element(By.ID, "error").text
    assert error == ("the uploaded file is not an image this server can read; upload a PNG, JPEG, GIF, BMP or "
                     "WebP file")


def test_own_folder_cards_show_file_caption_and_image(own_server, browser):
    """The page of one's own image folder: each card shows its file name and the first caption written for
    it, its picture is the file itself (its pixel size) served from the --images folder, and opening a card
    lists all the captions written for the file above its nearest captions."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    from pcmr.search.compose import trained_similarity

    url, index, written = own_server
    wait = WebDriverWait(browser, 30)
    browser.get(url + "/")
    wait.until(lambda d: "20 images, 40 captions" in d.find_element(By.ID, "status").text)
    browser.find_element(By.ID, "query").send_keys("a blue picture with a red square")
    browser.find_element(By.ID, "k").clear()
    browser.find_element(By.ID, "k").send_keys("5")
    browser.find_element(By.ID, "search-button").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#results .card")) == 5)
    wait.until(lambda d: d.execute_script(
        "return Array.from(document.querySelectorAll('#results .card img')).every(i => i.complete)"))
    cards = browser.find_elements(By.CSS_SELECTOR, "#results .card")
    expected = index.search_text("a blue picture with a red square", k=5, similarity=trained_similarity(index))
    assert [int(c.get_attribute("data-index")) for c in cards] == expected.indices[0].tolist()
    for card in cards:
        name = card.find_element(By.CSS_SELECTOR, ".file").text
        assert name == index.image_ids[int(card.get_attribute("data-index"))] and name in written
        (height, width, _), captions = written[name]
        lines = card.find_elements(By.CSS_SELECTOR, ".labels")
        assert [line.text for line in lines] == [captions[0]], name
        assert lines[0].get_attribute("title") == "\n".join(captions)  # every caption on hover
        pictures = card.find_elements(By.TAG_NAME, "img")
        assert len(pictures) == 1, f"{name}: the card has no picture"
        picture = pictures[0]
        assert picture.get_attribute("src") == f"{url}/images/{card.get_attribute('data-index')}"
        size = browser.execute_script("return [arguments[0].naturalWidth, arguments[0].naturalHeight]", picture)
        assert size == [width, height], name  # the PNG file of the folder, loaded: not a broken image
    opened = cards[-1]
    name = opened.find_element(By.CSS_SELECTOR, ".file").text
    opened.click()
    wait.until(ec.visibility_of_element_located((By.ID, "detail")))
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#detail-body > .caption-row")) == 2)
    assert browser.find_element(By.CSS_SELECTOR, "#detail-body h2").text == f"image {name}"
    headings = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "#detail-body h3")]
    assert headings == ["its captions", "nearest captions"]
    rows = browser.find_elements(By.CSS_SELECTOR, "#detail-body > .caption-row")
    assert [row.text for row in rows] == written[name][1]
    nearest = browser.find_elements(By.CSS_SELECTOR, "#detail-body > div > .caption-row")
    assert len(nearest) == 5
    wait.until(lambda d: d.execute_script(
        "const i = document.querySelector('#detail-body img'); return i.complete && i.naturalWidth > 0"))
    (height, width, _), _ = written[name]
    assert browser.execute_script("const i = document.querySelector('#detail-body img'); "
                                  "return [i.naturalWidth, i.naturalHeight]") == [width, height]
