"""The pre-flight check's verdicts (bertkit/engine/preflight.py) on the statements ranks exchange, the content
fingerprints it compares, and which errors mean "a peer is gone" (bertkit/engine/dist.py). The check under
real launchers, with two simulated nodes, is in tests/e2e/test_multinode.py.

Data: the Python documentation corpus bertkit ships as sample data (the `corpus_dir` fixture)."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest
import torch

from bertkit.config.recipe import load_recipe
from bertkit.engine.dist import peer_failure
from bertkit.engine.preflight import NODE_LOCAL_KEYS, fingerprint, first_difference, flatten, statement


def _statements(corpus: Path, count: int = 2, *overrides: str) -> list[dict]:
    recipe = load_recipe("bert-tiny", [f"data.train={corpus}", *overrides])
    ours = statement(recipe, {"output": "runs/x", "resume": None}, {"corpus": corpus})
    return [copy.deepcopy(ours) for _ in range(count)]


def test_ranks_that_agree_pass(corpus_dir: Path) -> None:
    assert first_difference(_statements(corpus_dir, 4)) is None


def test_the_first_recipe_key_that_differs_is_named_with_both_values(corpus_dir: Path) -> None:
    statements = _statements(corpus_dir, 3)
    other = load_recipe("bert-tiny", [f"data.train={corpus_dir}", "optim.lr=5e-4", "train.steps=7"])
    statements[2] = statement(other, {"output": "runs/x", "resume": None}, {"corpus": corpus_dir})
    statements[2]["node"] = "gpu-node-7"
    message = first_difference(statements)
    assert message is not None
    assert message.startswith("rank 2 (node gpu-node-7, local rank 0) has optim.lr=0.0005 but rank 0 ")
    assert "optim.lr=0.001;" in message  # bert-tiny's own rate, and only the first differing key is named


def test_version_arguments_and_inputs(corpus_dir: Path, tmp_path: Path) -> None:
    statements = _statements(corpus_dir)
    statements[1]["version"] = "0.0.9"
    assert "runs bertkit 0.0.9" in str(first_difference(statements))

    statements = _statements(corpus_dir)
    statements[1]["arguments"]["resume"] = "auto"
    assert "was given resume=auto but rank 0 " in str(first_difference(statements))

    statements = _statements(corpus_dir)
    statements[1]["inputs"]["corpus"] = fingerprint(tmp_path / "nowhere")
    assert str(first_difference(statements)).startswith("rank 1 (node ")
    assert "cannot find the corpus" in str(first_difference(statements))
    statements[0]["inputs"]["corpus"], statements[1]["inputs"]["corpus"] = "absent", fingerprint(corpus_dir)
    assert str(first_difference(statements)).startswith("rank 0 (node ")  # rank 0 is the one without it


def test_node_local_settings_may_differ(corpus_dir: Path) -> None:
    """engine.threads depends on the machine, not on what is computed."""
    assert set(NODE_LOCAL_KEYS) == {"engine.threads"}
    a = load_recipe("bert-tiny", [f"data.train={corpus_dir}", "engine.threads=4"])
    b = load_recipe("bert-tiny", [f"data.train={corpus_dir}", "engine.threads=16"])
    statements = [statement(recipe, {}, {"corpus": corpus_dir}) for recipe in (a, b)]
    assert first_difference(statements) is None
    assert "engine.threads" in flatten(a.model_dump(mode="json"))


def test_fingerprint_follows_contents_not_paths(corpus_dir: Path, tmp_path: Path) -> None:
    """A copy elsewhere has the same fingerprint; one changed byte in the (sampled) token shard, a changed
    manifest, or a missing file does not."""
    copy_dir = tmp_path / "copy"
    shutil.copytree(corpus_dir, copy_dir)
    assert fingerprint(copy_dir) == fingerprint(corpus_dir) != fingerprint(None)
    tokens = bytearray((copy_dir / "tokens.bin").read_bytes())
    tokens[0] ^= 1
    (copy_dir / "tokens.bin").write_bytes(bytes(tokens))
    assert fingerprint(copy_dir) != fingerprint(corpus_dir)
    shutil.copy(corpus_dir / "tokens.bin", copy_dir / "tokens.bin")
    assert fingerprint(copy_dir) == fingerprint(corpus_dir)
    (copy_dir / "offsets.npy").unlink()
    assert fingerprint(copy_dir) != fingerprint(corpus_dir)
    assert fingerprint(tmp_path / "nowhere") == "absent"


def test_large_files_are_sampled_at_both_ends_and_the_middle(tmp_path: Path) -> None:
    big = tmp_path / "shard.bin"
    data = bytearray(3 << 20)
    big.write_bytes(bytes(data))
    before = fingerprint(big)
    for offset in (0, len(data) // 2, len(data) - 1):
        changed = bytearray(data)
        changed[offset] = 1
        big.write_bytes(bytes(changed))
        assert fingerprint(big) != before, offset
    big.write_bytes(bytes(data) + b"\0")
    assert fingerprint(big) != before  # the size is part of it


def test_peer_failures_are_told_from_other_errors() -> None:
    gone = RuntimeError(
        "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
        "[127.0.0.1]:19847. This is typically caused by a remote worker crashing."
    )
    assert peer_failure(gone) is None  # no process group of several ranks here: not a peer's failure
    store = torch.distributed.DistStoreError("Timed out after 601 seconds waiting for clients. 1/2 clients joined.")
    message = peer_failure(store)
    assert message is not None
    assert message.startswith("rank 0 lost contact with the rest of the job (Timed out after 601 seconds")
    assert "engine.timeout" in message and "\n" not in message
    assert peer_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied")) is None
    assert peer_failure(ValueError("Connection closed by peer")) is None


@pytest.mark.parametrize("timeout", ["0", "-5"])
def test_engine_timeout_must_be_positive(corpus_dir: Path, timeout: str) -> None:
    from bertkit.errors import BertkitError

    with pytest.raises((BertkitError, ValueError), match="engine.timeout"):
        load_recipe("bert-tiny", [f"data.train={corpus_dir}", f"engine.timeout={timeout}"])
