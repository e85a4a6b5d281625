"""An ONNX export run by ONNX Runtime behind the call bertkit's PyTorch models answer:
`runner(input_ids, attention_mask, token_type_ids) -> {output name: tensor}`.

`bertkit predict`, `bertkit embed` and the export's accuracy gate hand an `OnnxRunner` to the same code they hand
a torch module (tokenisation, length-sorted batching, the task's scoring and output writing), so the two
back-ends cannot drift apart: only the forward pass differs.

Also what the export (onnx.py) and its quantiser (onnx_quantize.py) share with it: the graph's file name,
the check that the `onnx` extra is installed, and the silencing of the ONNX tools' loggers.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch

from bertkit.errors import BertkitError

ONNX_GRAPH = "model.onnx"
INSTALL_HINT = "pip install 'bertkit[onnx]'"


def import_onnxruntime() -> ModuleType:
    """onnxruntime, imported only when an ONNX model is used (it is an extra, and slow to import)."""
    try:
        import onnxruntime
    except ImportError:
        raise BertkitError(f"ONNX models need onnx and onnxruntime, which are not installed: {INSTALL_HINT}") from None
    return onnxruntime


def require_onnx() -> None:
    """The export needs onnx (the exporter writes through it), onnxscript (torch.export's ONNX translator) and
    onnxruntime (the parity check, quantisation): all three come with the `onnx` extra."""
    import importlib.util

    missing = [name for name in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(name) is None]
    if missing:
        raise BertkitError(f"--to onnx needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
                           f"not installed: {INSTALL_HINT}")  # fmt: skip


@contextlib.contextmanager
def quiet_loggers() -> Iterator[None]:
    """torch.export, onnxscript and the quantiser log their passes (up to WARNING level, e.g. "consider
    pre-processing") on the root logger: progress of theirs, not the user's business. Restored afterwards."""
    before = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(before)


class OnnxRunner:
    """An ONNX Runtime session on the CPU that takes and returns torch tensors like a bertkit model.

    Inputs the graph does not declare are dropped (an export of a model without segment embeddings has no
    token_type_ids); inputs it declares but the caller leaves out get the values the PyTorch model assumes for
    them: every token attended to, segment 0.
    """

    def __init__(self, graph: Path, threads: int = 0) -> None:
        ort = import_onnxruntime()
        options = ort.SessionOptions()
        # 0 lets ONNX Runtime pick (one thread per physical core); inter-op threads only help graphs with
        # parallel branches, which an encoder has not.
        options.intra_op_num_threads = max(0, threads)
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self.session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        except Exception as err:  # a corrupt or foreign file: onnxruntime raises its own exception types
            raise BertkitError(f"{graph} is not an ONNX graph ONNX Runtime can load ({err}); export it again") from None
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]

    def __call__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        given = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        feed: dict[str, Any] = {}
        for name in self.inputs:
            value = given.get(name)
            if value is None:
                fill = 1 if name == "attention_mask" else 0
                feed[name] = np.full(tuple(input_ids.shape), fill, dtype=np.int64)
            else:
                # The graph takes int64 for all three (a boolean mask included), as the export traced them.
                feed[name] = value.detach().cpu().numpy().astype(np.int64, copy=False)
        values = self.session.run(self.outputs, feed)
        return {name: torch.from_numpy(value) for name, value in zip(self.outputs, values, strict=True)}
