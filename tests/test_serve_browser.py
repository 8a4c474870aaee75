"""The `pcmr serve` page in a real browser: Debian's chromium, headless, driven by selenium through
/usr/bin/chromedriver (no driver download). Run by `make test-browser` (which `.ci/run` calls after
installing chromium and chromium-driver); a missing browser is a failure, never a skip."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time

import pytest

from _search_index import make_index

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


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    import uvicorn

    from pcmr.search import GalleryIndex
    from pcmr.search.service import create_app

    index = GalleryIndex.load(make_index(tmp_path_factory.mktemp("browser")))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(create_app(index), host="127.0.0.1", port=port, log_level="warning")
    instance = uvicorn.Server(config)
    thread = threading.Thread(target=instance.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not instance.started:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail("uvicorn did not start", pytrace=False)
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", index
    instance.should_exit = True
    thread.join(timeout=10)


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
    expected = index.search_text("a red circle on the left", k=6)
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
    nearest = index.search(index.images[int(first.get_attribute("data-index"))], k=5, modality="image")
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
