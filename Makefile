# pagemill: `make corpus` builds the sample corpus, `make test` runs the tests.
# Each target installs what it needs on first use (.venv, Debian packages).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEB_PACKAGES := poppler-utils
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: corpus report release train test test-all lint samples bench deps clean airflow retrieve

# The DAG's relabel and audit stages ask a local transformers serve (relabel.serve starts it, runs the DAG, stops it)
# over a tiny random-weight VLM that model/ exports; set OPENAI_BASE_URL etc. and run pipelines.corpus for a real one.
RELABEL_CHECKPOINT := out/relabel/tiny-checkpoint

corpus: $(STAMP) $(RELABEL_CHECKPOINT)/config.json
	$(PY) -m relabel.serve --checkpoint $(RELABEL_CHECKPOINT) -- $(PY) -m pipelines.corpus $(ARGS)
	@echo "corpus report: make report (writes out/report/index.html from out/corpus)"

# One static HTML page about out/corpus: plots, tables from the manifest, sample pages with unit tests.
report: $(STAMP) out/corpus/manifest.json
	$(PY) -m pipelines.report --corpus out/corpus --out out/report $(ARGS)

$(RELABEL_CHECKPOINT)/config.json: | $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m model.checkpoint --export-tiny $(RELABEL_CHECKPOINT)

# Hub-ready release of out/corpus in out/release (built first if missing); a dry run of the push
# unless ARGS has --repo-id ORG/NAME --push (HF_TOKEN from the environment).
release: $(STAMP) out/corpus/manifest.json
	$(PY) -m pipelines.release --corpus out/corpus --out out/release $(ARGS)

# Airflow 3 in its own venv (.venv-airflow) for dags/pagemill_refresh.py; the DAG tests install it too.
airflow:
	bash scripts/install_airflow.sh

# Tiny VLM through SFT, GRPO, merge search and FastMTP on the curriculum pages (configs/train.yaml; out/curriculum
# and out/corpus, whose eval split joins the evaluation, built first if missing). The corpus-only run:
# ARGS="--config configs/train_corpus.yaml".
train: $(STAMP) out/curriculum/manifest.json out/corpus/manifest.json
	$(PY) -m model.train $(ARGS)

# Failure-mode classifiers on the corpus and errors.json of `make train`, then retrieval (docs/classifiers.md).
retrieve: $(STAMP) out/corpus/manifest.json
	@test -f out/model/errors.json || { echo "out/model/errors.json is missing: run make train first"; exit 1; }
	$(PY) -m classifiers.train --corpus out/corpus --errors out/model/errors.json --failing-corpus out/curriculum \
	  --set eval_fraction=0 --out out/classifiers  # configs/train.yaml's eval_fraction: the curriculum's train pages
	$(PY) -m classifiers.retrieve --corpus out/corpus --classifiers out/classifiers --k 1000 --out out/retrieval $(ARGS)

out/curriculum/manifest.json: | $(STAMP)
	$(PY) -m synth.curriculum --out out/curriculum

out/corpus/manifest.json: | $(STAMP) $(RELABEL_CHECKPOINT)/config.json
	$(PY) -m relabel.serve --checkpoint $(RELABEL_CHECKPOINT) -- $(PY) -m pipelines.corpus

# ruff (config in pyproject.toml): pyflakes, import order, lines of at most 120 characters.
lint: $(STAMP)
	$(VENV)/bin/ruff check .

test: $(STAMP)
	$(PY) -m pytest -m "not slow" -q $(ARGS)

test-all: $(STAMP)
	$(PY) -m pytest -q $(ARGS)

samples: $(STAMP)
	$(PY) -m samples.make

bench: $(STAMP)
	$(PY) benchmarks/ingest.py $(ARGS)
	$(PY) benchmarks/ingest.py --kind scan --repeats 1 --scale 2 --pdftoppm-pages 100
	$(PY) benchmarks/sources.py
	$(PY) benchmarks/object_store.py
	$(PY) benchmarks/plan.py
	$(PY) benchmarks/png.py
	$(PY) benchmarks/unit_tests.py
	$(PY) benchmarks/teds.py
	$(PY) benchmarks/math_checks.py
	$(PY) benchmarks/clean.py
	$(PY) benchmarks/synth.py
	$(PY) benchmarks/synth_cpu.py
	$(PY) benchmarks/train.py
	$(PY) benchmarks/mtp.py
	$(PY) benchmarks/grpo.py
	$(PY) benchmarks/relabel.py
	$(PY) benchmarks/release.py

deps: $(STAMP)

$(STAMP): pyproject.toml scripts/install_browser_assets.sh scripts/install_latex.sh assets/katex/package.json assets/katex/package-lock.json
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  $(SUDO) apt-get install -y -q $$missing >/dev/null 2>&1 || \
	  { $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q $$missing >/dev/null; }; \
	fi
	# Debian chromium + fonts and KaTeX from npm (assets/katex): math checks and HTML synthesis
	scripts/install_browser_assets.sh
	# pdflatex (Debian texlive-latex-base/-recommended/-extra (multirow), fonts-recommended, lmodern): LaTeX synthesis
	bash scripts/install_latex.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first, pinned: a plain `torch` requirement would pull a multi-GB CUDA build.
	$(PY) -m pip install -q --disable-pip-version-check 'torch==2.13.0'
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@

clean:
	rm -rf out .pytest_cache
