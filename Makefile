# pcmr: two commands on a fresh machine.
#   make demo   -- installs, then runs the main job on the built-in data
#   make test   -- installs, then lints and runs the whole test suite
#   make docs   -- builds the documentation site (mkdocs, --strict) into site/
#   make results-docs -- regenerates the study results quoted in README.md and docs/*.md
#   make gpu-check -- the device check on a CUDA GPU (about 5 minutes): agreement with the CPU, every
#                   recipe on cuda, demo/evaluate/study on cuda, throughput; log in docs/benchmark_logs/
#   make test-browser -- the `pcmr serve` page in headless chromium (needs the Debian packages
#                   chromium and chromium-driver; .ci/run installs them and runs both targets)
# Both create/refresh a local virtual environment in .venv. torch is installed
# first and pinned (TORCH_SPEC), so pip never resolves a different torch build
# through a dependency; override it elsewhere, e.g. `make test TORCH_SPEC=torch`.

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= dev,fast,eccv,pretrained,search,vectordb,adamp,tensorboard,hf
BIN := $(VENV)/bin
STAMP := $(VENV)/.pcmr-installed

.PHONY: demo test test-browser lint install clean bench docs results-docs gpu-check

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/pcmr demo

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/mypy

test: lint
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -n 2 --dist loadfile

test-browser: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m browser tests/search/test_serve_browser.py

docs: $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[docs]"
	$(BIN)/mkdocs build --strict --site-dir site

results-docs: $(STAMP)
	$(BIN)/python tools/results_docs.py

gpu-check: $(STAMP)
	PYTHON=$(BIN)/python tools/gpu_check.sh

bench: $(STAMP)
	$(BIN)/python benchmarks/similarity.py

clean:
	rm -rf $(VENV) build dist site src/*.egg-info .pytest_cache .ruff_cache .mypy_cache
