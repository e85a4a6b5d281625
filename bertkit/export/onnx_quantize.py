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

import torch

from bertkit.config.schema import ModelConfig
from bertkit.config.task_kinds import HEADED_ARCHITECTURES
from bertkit.errors import BertkitError
from bertkit.modelio.modeldir import window_length

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


class GateScorer:
    """The model's task metric on an evaluation file, in points (0-100), for any model that answers bertkit's
    call: the PyTorch module, or an OnnxRunner of either graph. The file is read, checked against the model's
    labels and encoded once, when the scorer is built (before any export work)."""

    def __init__(self, meta: dict[str, Any], cfg: ModelConfig, tokenizer: Any, eval_file: Path) -> None:
        from bertkit.tasks.kinds import task_kind

        architecture = meta.get("architecture")
        if architecture not in HEADED_ARCHITECTURES:
            raise BertkitError(
                f"--eval scores a fine-tuned model on its task, and this is a {architecture} model without a task "
                "head; export it without --eval"
            )
        if not Path(eval_file).exists():
            raise BertkitError(f"evaluation file not found: {eval_file}")
        self.eval_file = Path(eval_file)
        max_len = window_length(cfg, meta.get("task") or {}, None)
        self.metric, self._score = task_kind(str(architecture)).gate_scorer(meta, cfg, tokenizer, self.eval_file,
                                                                             max_len)  # fmt: skip

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
