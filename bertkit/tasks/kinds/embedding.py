"""What the bi-encoder kinds (retrieval.py, similarity.py) share: the vectors' pooling and normalisation, settled
from the task and the checkpoint, and the parts of the kind contract they do not serve yet."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bertkit.config.schema import ModelConfig, TaskConfig
from bertkit.errors import BertkitError
from bertkit.modelio.st_dir import trained_pooling
from bertkit.models.sentence import SentenceEncoder
from bertkit.tasks.kinds.base import FineTuned, Part, PredictRequest, RowPredictor
from bertkit.tokenizers.base import Tokenizer


def checkpoint_task(task: TaskConfig, meta: dict[str, Any]) -> TaskConfig:
    """`task` with pooling "auto" and normalize unset taken from how the checkpoint pools (a sentence-transformers
    directory's modules, a bertkit bi-encoder's `embedding`), else the mean, normalised. A frozen encoder's head
    (mode feature) with `pool` unset reads the states pooled as the checkpoint pools them, else their mean (a
    pooler or [CLS] state never trained for sentences is a poor feature). Other kinds unchanged."""
    if task.reads("pool") and task.mode == "feature" and "pool" not in task.model_fields_set:
        return task.model_copy(update={"pool": trained_pooling(meta, "the model") or "mean"})
    if not task.reads("pooling") or (task.pooling != "auto" and task.normalize is not None):
        return task
    saved = meta.get("embedding") or {}
    pooling = (trained_pooling(meta, "the model") or "mean") if task.pooling == "auto" else task.pooling
    return task.model_copy(update={
        "pooling": pooling,
        "normalize": bool(saved.get("normalize", True)) if task.normalize is None else task.normalize,
    })  # fmt: skip


@dataclass
class LoadedEncoder:
    """A bi-encoder ready to embed: pooled as it was trained, unit vectors, in eval mode on its device, with the
    tokenizer and the window it reads."""

    model: SentenceEncoder
    model_dir: Path
    meta: dict[str, Any]
    config: ModelConfig
    tokenizer: Tokenizer
    max_len: int


def load_sentence_encoder(model_path: Path | str, device: torch.device,
                          max_seq_len: int | None = None) -> LoadedEncoder:  # fmt: skip
    """The model at `model_path` as a bi-encoder (`mine-negatives`, `predict --corpus`, a distillation teacher):
    pooled as it records (mean otherwise), normalised, reading `max_seq_len` tokens, else the window it records, else
    its positions."""
    from bertkit.engine.checkpoint import load_state
    from bertkit.modelio.modeldir import encoder_weights, load_model_dir
    from bertkit.models.pretraining import build_encoder

    model_dir, meta, cfg, weights, tokenizer = load_model_dir(str(model_path))
    model = SentenceEncoder(build_encoder(cfg), trained_pooling(meta, model_dir) or "mean", True)
    load_state(model.encoder, encoder_weights(weights), str(model_dir))
    limit = cfg.max_position_embeddings - cfg.position_offset
    window = max_seq_len or (meta.get("embedding") or {}).get("max_seq_length") or limit
    return LoadedEncoder(model.to(device).eval(), model_dir, meta, cfg, tokenizer, min(window, limit))


def check_bi_encoder(task: TaskConfig, model_cfg: ModelConfig) -> None:
    """What a bi-encoder's settings and model must agree on, checked before anything is written."""
    if model_cfg.family == "xlnet":
        raise BertkitError("bertkit trains bi-encoders of BERT-layout encoders ([CLS] first); XLNet puts <cls> last, "
                           "which bertkit embed and the exports read another way: use another family")  # fmt: skip


def sentence_encoder(task: TaskConfig):  # noqa: ANN201 - a builder for Prepared.build
    pooling = "mean" if task.pooling == "auto" else task.pooling
    normalize = True if task.normalize is None else task.normalize
    return lambda encoder: SentenceEncoder(encoder, pooling, normalize)


def embedding_meta(task: TaskConfig) -> dict[str, Any]:
    """What bertkit_model.json records of the vectors (read back by `checkpoint_task`, `embed` and the export)."""
    return {"pooling": task.pooling, "normalize": task.normalize, "max_seq_length": task.max_seq_len}


class NotServed:
    """What the bi-encoder kinds share beyond `prepare`: the parts of the kind contract (distillation, predict) they do
    not serve yet, each refused in one line. (Their model is the encoder and its pooling, so it can be scored as it
    is: `scores_as_is` in config/task_kinds.py.)"""

    name: str

    def _refuse(self, what: str) -> BertkitError:
        return BertkitError(f"{what} does not serve {self.name} models yet; `bertkit embed` gives their vectors")

    def distill_data(self, teacher: FineTuned, *args: Any, **kwargs: Any) -> Any:
        raise self._refuse("the distillation task stage")

    def logits(self, model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        raise self._refuse("the distillation task stage")

    def count(self, batch: dict[str, torch.Tensor]) -> float:
        raise self._refuse("the distillation task stage")

    def rows(self, student: torch.Tensor, teacher: torch.Tensor, batch: dict[str, torch.Tensor]) -> list[Part]:
        raise self._refuse("the distillation task stage")

    def predictor(self, request: PredictRequest) -> RowPredictor:
        raise BertkitError(f"a {self.name} model predicts by searching a corpus: give `bertkit predict` a --corpus (a "
                           "BEIR folder or text lines); `bertkit embed` gives its vectors")  # fmt: skip
