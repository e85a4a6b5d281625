"""Inputs, tokenizers and corpora in object storage, against a real S3 API on loopback: moto's server
(`ThreadedMotoServer` on 127.0.0.1, started here). bertkit talks to it through s3fs with the endpoint and
credentials from the usual environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...); the test itself puts,
reads and damages objects with boto3, the reference S3 client, not with bertkit's own code.

Data: Python's documentation text (the conftest fixture), split into input files as in test_corpus_tasks.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import run_error, run_json
from test_corpus_tasks import FILES, TASKS, corpus_files, task_args, write_inputs
from test_distributed import assert_same_curve, assert_same_weights, pretrain, sets

from bertkit.corpus.build import BuildOptions, build_corpus
from bertkit.engine.dist import free_port

pytest.importorskip("s3fs", reason="the s3 tests need the bertkit[s3] extra (make install-test installs it)")
moto_server = pytest.importorskip("moto.server", reason="the s3 tests need moto[server] (the test extra)")

BUCKET = "corpora"


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory):
    """A moto S3 server on 127.0.0.1 and the environment that points bertkit (and boto3) at it."""
    import boto3

    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "BERTKIT_CACHE": str(tmp_path_factory.mktemp("cache")),
    }
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    yield client
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    server.stop()


@pytest.fixture(scope="module")
def s3_inputs(s3, tmp_path_factory: pytest.TempPathFactory, text_file: Path, tokenizer_dir: Path) -> list[Path]:
    """The local input files, and the same files (and the tokenizer) uploaded to the bucket with boto3."""
    paths = write_inputs(text_file, tmp_path_factory.mktemp("s3-inputs"))
    for path in paths:
        s3.upload_file(str(path), BUCKET, f"inputs/{path.name}")
    for file in tokenizer_dir.iterdir():
        s3.upload_file(str(file), BUCKET, f"tokenizer/{file.name}")
    return paths


def download(s3, prefix: str, target: Path) -> Path:
    """A corpus prefix of the bucket as a local directory, fetched with boto3."""
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix + "/")["Contents"]
    for item in listed:
        local = target / item["Key"][len(prefix) + 1 :]
        local.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(BUCKET, item["Key"], str(local))
    return target


@pytest.fixture(scope="module")
def s3_corpus(s3, s3_inputs: list[Path]) -> str:
    """A corpus built from the bucket's inputs and tokenizer, written to the bucket: the CLI, end to end."""
    url = f"s3://{BUCKET}/corpus"
    built = run_json(
        "build-corpus", "-i", f"s3://{BUCKET}/inputs/*.txt", "-t", f"s3://{BUCKET}/tokenizer", "-o", url,
        "--max-seq-len", "64",
    )  # fmt: skip
    assert built["output"] == url and built["stats"]["files"] == FILES
    return url


def test_a_corpus_from_the_bucket_equals_one_from_local_files(
    s3, s3_inputs: list[Path], s3_corpus: str, tokenizer_dir: Path, tmp_path: Path
) -> None:
    local = build_corpus(s3_inputs, tokenizer_dir, tmp_path / "local", BuildOptions(max_seq_len=64))
    fetched = corpus_files(download(s3, "corpus", tmp_path / "fetched"))
    expected = corpus_files(tmp_path / "local")
    assert sorted(fetched) == sorted(expected)
    for name, data in expected.items():
        if name != "manifest.json":  # which records the inputs: URLs there, local paths here
            assert fetched[name] == data, name
    manifest = json.loads(fetched["manifest.json"])
    assert manifest["inputs"] == [f"s3://{BUCKET}/inputs/docs-{k}.txt" for k in range(FILES)]
    assert manifest["checksums"] == local["checksums"] and manifest["stats"] == local["stats"]
    # Never over an existing corpus without --overwrite, and one line for a missing input.
    again = ["build-corpus", "-i", f"s3://{BUCKET}/inputs/*.txt", "-t", str(tokenizer_dir), "-o", s3_corpus]
    assert "already holds a corpus; pass --overwrite" in run_error(*again)
    missing = ["build-corpus", "-i", f"s3://{BUCKET}/nothing/*.txt", "-t", str(tokenizer_dir), "-o", "x"]
    assert run_error(*missing) == f"error: no input file matches 's3://{BUCKET}/nothing/*.txt'"


def test_tasks_read_the_bucket_and_merge_into_it(s3, s3_inputs: list[Path], s3_corpus: str, tmp_path: Path) -> None:
    """3 tasks read their slices from the bucket; the merge uploads the corpus: the same as one build's."""
    parts = tmp_path / "parts"
    inputs = [f"s3://{BUCKET}/inputs/docs-{k}.txt" for k in range(FILES)]
    for i in range(TASKS):
        args = task_args(inputs, f"s3://{BUCKET}/tokenizer", parts, ["--max-seq-len", "64"])  # type: ignore[arg-type]
        assert run_json(*args, "--task-index", str(i))["task"] == i
    run_json("corpus", "merge", str(parts), "--output", f"s3://{BUCKET}/merged")
    merged = corpus_files(download(s3, "merged", tmp_path / "merged"))
    assert merged == corpus_files(download(s3, "corpus", tmp_path / "one"))


def _fill_in_a_process(url: str) -> subprocess.Popen:
    code = (
        "import sys; from bertkit.corpus.remote import cached_corpus; "
        "print(cached_corpus(sys.argv[1], on_fill=lambda u: print('filled')))"
    )
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-c", code, url], stdout=subprocess.PIPE, text=True, env=env)


def test_the_cache_is_filled_once_per_node_and_verified(s3, s3_corpus: str, tmp_path: Path) -> None:
    """Two processes of one node (as two ranks) ask for the corpus at once: one fills the cache, the other
    waits for it; both get the same directory, whose files are the bucket's."""
    procs = [_fill_in_a_process(s3_corpus) for _ in range(2)]
    outputs = [proc.communicate()[0].split() for proc in procs]
    assert all(proc.returncode == 0 for proc in procs)
    assert sorted(len(out) for out in outputs) == [1, 2] and sum(out.count("filled") for out in outputs) == 1
    cached = Path(outputs[0][-1])
    assert Path(outputs[1][-1]) == cached
    assert corpus_files(cached) == corpus_files(download(s3, "corpus", tmp_path / "fetched"))
    # A later run finds it: no fill.
    again = _fill_in_a_process(s3_corpus)
    assert again.communicate()[0].split() == [str(cached)]


def test_a_damaged_object_is_caught_by_its_checksum(s3, s3_corpus: str, tmp_path: Path) -> None:
    """A corpus whose tokens.bin was changed in the bucket (one byte) fails on its checksum, in one line,
    before training, and leaves no cache directory behind."""
    fetched = download(s3, "corpus", tmp_path / "copy")
    tokens = bytearray((fetched / "tokens.bin").read_bytes())
    tokens[1000] ^= 0x01
    (fetched / "tokens.bin").write_bytes(bytes(tokens))
    for file in fetched.rglob("*"):
        if file.is_file():
            s3.upload_file(str(file), BUCKET, f"damaged/{file.relative_to(fetched).as_posix()}")
    cache = Path(os.environ["BERTKIT_CACHE"]) / "corpora"
    before = sorted(p.name for p in cache.iterdir()) if cache.exists() else []
    line = run_error("pretrain", "-r", "bert-tiny", "-c", f"s3://{BUCKET}/damaged", "-o", str(tmp_path / "run"))
    assert line == (
        f"error: corpus s3://{BUCKET}/damaged: tokens.bin does not match the manifest's checksum (damaged in the "
        "bucket or in transit); rebuild or upload the corpus again"
    )
    after = sorted(p.name for p in cache.iterdir() if not p.name.endswith(".lock"))
    assert after == [name for name in before if not name.endswith(".lock")]
    assert not (tmp_path / "run").exists()


def test_a_scheme_without_its_filesystem_names_the_extra(monkeypatch: pytest.MonkeyPatch, tokenizer_dir: Path) -> None:
    import importlib

    registry = importlib.import_module("fsspec.registry")._registry  # fsspec's cache of loaded filesystems
    # As if bertkit[s3] were not installed: s3fs cannot be imported, and fsspec has not loaded it before.
    monkeypatch.setitem(sys.modules, "s3fs", None)
    for scheme in ("s3", "s3a"):
        monkeypatch.delitem(registry, scheme, raising=False)
    line = run_error("build-corpus", "-i", "s3://bucket/inputs/*.txt", "-t", str(tokenizer_dir), "-o", "out")
    assert line.startswith("error: s3://bucket/inputs/*.txt: no filesystem for s3:// is installed")
    assert line.endswith('pip install "bertkit[s3]"')


@pytest.mark.slow
def test_ddp_pretraining_on_the_bucket_matches_local_files(
    s3, s3_inputs: list[Path], s3_corpus: str, tokenizer_dir: Path, tmp_path: Path
) -> None:
    """2 processes (torchrun, DDP) train on the corpus URL through the node cache: the same loss curve and
    weights as the same run on the corpus built from the local files."""
    build_corpus(s3_inputs, tokenizer_dir, tmp_path / "local", BuildOptions(max_seq_len=64))
    pretrain(tmp_path / "local", tmp_path / "run-local", *sets(), "--engine", "ddp", procs=2)
    pretrain(s3_corpus, tmp_path / "run-s3", *sets(), "--engine", "ddp", procs=2, env=dict(os.environ))  # type: ignore[arg-type]
    assert_same_curve(tmp_path / "run-s3", tmp_path / "run-local")
    assert_same_weights(tmp_path / "run-s3", tmp_path / "run-local")
