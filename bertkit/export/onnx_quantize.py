"""int8 for `bertkit export --to onnx --quantize int8`, and the accuracy gate that keeps it honest.

Dynamic quantisation (ONNX Runtime's `quantize_dynamic`): the weights of every MatMul/Gemm are stored as int8,
and activations are quantised to uint8 at run time, batch by batch, with their own scale. It needs no
calibration data and speeds up the CPU matmuls that dominate an encoder, but its known failure is silent: a
model that loses a few points of accuracy (onnxruntime#11286, optimum#151) or nearly everything
(onnxruntime#9599). The gate scores the fp32 and the int8 graph with the model's own task metric on an
evaluation file, through the same evaluation code fine-tuning uses, and refuses a loss over `--max-drop` points.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.config.schema import ModelConfig, TaskConfig, qa_context_room
from bertkit.errors import BertkitError
from bertkit.tasks.architectures import TASK_ARCHITECTURES, window_length

# Dynamic quantisation computes each activation's scale over the whole batch tensor, padding included, so an
# int8 prediction depends on which examples share its batch (measured: all-MiniLM-L6-v2 fine-tuned for 20
# steps got 67.3% of 300 reviews right one at a time in int8, 65.0% in file-order batches of 32; fp32 67.0%).
# The gate therefore scores int8 both one example at a time (which `predict --batch-size 1` reproduces
# exactly) and in batches of 32 in file order (predict's default batch size; predict sorts by length, so it
# pads less), and judges the worse of the two. fp32 does not depend on the batch: it is scored once.
GATE_BATCHES = (1, 32)


def quantize_int8(fp32: Path, int8: Path) -> None:
    """int8 weights (signed, per tensor: ONNX Runtime's default and what Optimum's dynamic configurations use),
    uint8 activations quantised at run time."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from bertkit.export.onnx_runtime import quiet_loggers

    with quiet_loggers():
        quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)


def _task_config(meta: dict[str, Any]) -> TaskConfig:
    """The task the model was fine-tuned with, from its metadata (which adds resolved entries of its own, such as
    the QA window's `version_2_with_negative`: only TaskConfig's fields are read)."""
    saved = meta.get("task") or {}
    return TaskConfig.model_validate({k: v for k, v in saved.items() if k in TaskConfig.model_fields})


class GateScorer:
    """The model's task metric on an evaluation file, in points (0-100), for any model that answers bertkit's
    call: the PyTorch module, or an OnnxRunner of either graph. The file is read, checked against the model's
    labels and encoded once, when the scorer is built (before any export work)."""

    def __init__(self, meta: dict[str, Any], cfg: ModelConfig, tokenizer: Any, eval_file: Path) -> None:
        architecture = meta.get("architecture")
        if architecture not in TASK_ARCHITECTURES:
            raise BertkitError(
                f"--eval scores a fine-tuned model on its task, and this is a {architecture} model without a task "
                "head; export it without --eval"
            )
        if not Path(eval_file).exists():
            raise BertkitError(f"evaluation file not found: {eval_file}")
        self.eval_file = Path(eval_file)
        task = _task_config(meta)
        saved = meta.get("task") or {}
        labels = list(meta.get("labels") or [])
        max_len = window_length(cfg, saved, None)
        cpu, pad = torch.device("cpu"), tokenizer.pad_id
        if architecture == "question-answering":
            from bertkit.tasks.qa import encode_qa, evaluate_qa, read_qa_file

            examples = read_qa_file(self.eval_file).examples
            stride = saved.get("doc_stride")
            stride = int(stride) if stride is not None and int(stride) < qa_context_room(max_len) else None
            use_types = cfg.type_vocab_size > 1
            features = encode_qa(examples, tokenizer, max_len, stride, use_types)
            with_null = bool(saved.get("version_2_with_negative"))
            self.metric = "f1"  # already in percent
            self._score = lambda m, n: evaluate_qa(m, examples, features, cpu, pad, use_types, task, with_null,
                                                   n)["f1"]  # fmt: skip
        elif architecture == "token-classification":
            from bertkit.tasks.token_classification import (
                encode_sentences,
                evaluate_tagger,
                read_token_file,
                resolve_tags,
                tag_indices_check,
            )

            data = read_token_file(self.eval_file)
            tags = resolve_tags(data, task.tag_scheme)
            tag_indices_check(tags, labels, self.eval_file)
            encoded = encode_sentences(data.words, tags, labels, tokenizer, max_len)
            with_entities = task.tag_scheme != "none"
            self.metric = task.metric or ("f1" if with_entities else "accuracy")
            self._score = lambda m, n: (
                100 * evaluate_tagger(m, encoded, tags, labels, cpu, pad, with_entities, n)[self.metric]
            )
        else:
            from bertkit.tasks.classification import (
                ClassificationBatches,
                encode_examples,
                evaluate_classifier,
                evaluate_multi_label,
                evaluate_regressor,
                label_indices,
                multi_hot,
            )
            from bertkit.tasks.data import read_task_file

            data = read_task_file(self.eval_file, task, task.eval_split)
            if architecture == "sequence-regression":
                targets = np.asarray(data.labels, dtype=np.float32)
                self.metric, scorer = "pearson", evaluate_regressor
            elif architecture == "sequence-multi-label":
                targets = multi_hot(data.labels or [], labels, self.eval_file)
                self.metric = "micro_f1"
                scorer = lambda m, b, d, n: evaluate_multi_label(m, b, d, task.threshold, n)  # noqa: E731
            else:
                targets = label_indices(data.labels or [], labels, self.eval_file)
                self.metric, scorer = "accuracy", evaluate_classifier
            use_types = data.pairs is not None and cfg.type_vocab_size > 1
            examples = encode_examples(data.texts, data.pairs, targets, tokenizer, max_len)
            batches = ClassificationBatches(examples, 1, pad, 0, use_types)  # its batch size: only for training
            self._score = lambda m, n: 100 * scorer(m, batches, cpu, n)[self.metric]

    def score(self, model: Any, batch_size: int = 1) -> float:
        with torch.no_grad():
            return round(float(self._score(model, batch_size)), 2)

    def gate(self, fp32: Any, int8: Any, max_drop: float) -> dict[str, Any]:
        """Both scores, or BertkitError when int8 (the worse of its batch sizes) loses more than `max_drop` points."""
        before = self.score(fp32)
        by_batch = {str(n): self.score(int8, n) for n in GATE_BATCHES}
        after = min(by_batch.values())
        drop = round(before - after, 2)
        if drop > max_drop:
            raise BertkitError(
                f"int8 loses {drop:.2f} {self.metric} points on {self.eval_file} (fp32 {before:.2f}, int8 {after:.2f} "
                f"at its worse batch size of {' and '.join(by_batch)}), over --max-drop {max_drop:g}; nothing was "
                "written. Export fp32 with --quantize none, or accept the loss with a larger --max-drop"
            )
        return {"eval": str(self.eval_file), "metric": self.metric, "fp32": before, "int8": after,
                "int8_by_batch_size": by_batch, "drop": drop, "max_drop": max_drop}  # fmt: skip
