"""`bertkit export --to onnx`: a bertkit model in, a self-contained ONNX directory out.

    OUT/model.onnx          the graph (fp32, or int8 weights with `--quantize int8`), dynamic batch and sequence
    OUT/bertkit_model.json  the source's metadata (task, labels, model configuration) + "format": "onnx"
    OUT/tokenizer files     as the source has them

A fine-tuned model is traced with its task head (outputs `logits`, or `start_logits`/`end_logits` for question
answering); any other model as its encoder pooled inside the graph (outputs `mean` and `cls`, what `bertkit
embed` computes). The graph is checked against PyTorch before anything is written, and the int8 graph against
the fp32 one on `--eval FILE` when given (bertkit/export/onnx_quantize.py).
"""

from __future__ import annotations

import math
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertkit.config.task_kinds import HEADED_ARCHITECTURES, spec_of_architecture
from bertkit.errors import BertkitError
from bertkit.export.onnx_runtime import ONNX_GRAPH, OnnxRunner, quiet_loggers, require_onnx
from bertkit.fsutil import atomic_output_dir, check_output_dir, write_json_atomic
from bertkit.modelio.modeldir import MODEL_META, ONNX_FORMAT, load_model_dir
from bertkit.modelio.st_dir import trained_pooling
from bertkit.tasks.architectures import build_task_model

DEFAULT_OPSET = 18  # the oldest opset the torch.export-based exporter emits natively (no down-conversion)
# Measured with torch 2.13 and onnxruntime 1.32: below 17 the exporter silently keeps opset 18; from 23 it
# emits the Attention operator, which ONNX Runtime's CPU kernel rejects for a boolean padding mask.
MIN_OPSET, MAX_OPSET = 17, 22
PARITY_TOLERANCE = 1e-4  # largest |ONNX - PyTorch| of any output the export accepts
QUANTIZE = ("none", "int8")


class _GraphOutputs(nn.Module):
    """A model's output dict as a tuple in a fixed order: ONNX graphs have positional, named outputs."""

    def __init__(self, model: nn.Module, names: list[str]) -> None:
        super().__init__()
        self.model, self.names = model, names

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, ...]:
        out = self.model(input_ids, attention_mask, token_type_ids)
        return tuple(out[name] for name in self.names)


def export_onnx(
    model_path: Path,
    output: Path,
    quantize: str = "none",
    eval_file: Path | None = None,
    max_drop: float = 1.0,
    opset: int = DEFAULT_OPSET,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write the ONNX directory (see the module docstring) and return a summary. With `quantize="int8"` and an
    `eval_file`, refuse (BertkitError, nothing written) when int8 scores more than `max_drop` points below fp32."""
    from bertkit.export.onnx_quantize import GateScorer, quantize_int8

    if quantize not in QUANTIZE:
        raise BertkitError(f"--quantize takes none or int8, not '{quantize}'")
    if not 0 <= max_drop < math.inf:  # NaN fails both comparisons
        raise BertkitError(f"--max-drop is the accuracy points int8 may lose, a finite 0 or more, not {max_drop}")
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise BertkitError(f"--opset must be between {MIN_OPSET} and {MAX_OPSET}, not {opset}")
    if eval_file is not None and quantize != "int8":
        raise BertkitError("--eval scores the int8 graph against the fp32 one; it needs --quantize int8")
    check_output_dir(output, overwrite)  # before the slow part: an existing output is refused at once
    require_onnx()
    model_dir, meta, cfg, weights, tokenizer = load_model_dir(model_path)
    architecture = str(meta.get("architecture"))
    if cfg.block_sparse:
        # Measured: BigBird switches from full to block-sparse attention above a length threshold, a Python branch
        # that a trace records one side of: the graph is exact on short inputs and 2e-2 off on long ones.
        raise BertkitError(
            f"{cfg.family} with model.attention=block_sparse cannot be traced to ONNX (its attention takes another "
            "path on long inputs, which a traced graph cannot follow); serve it with PyTorch"
        )
    if cfg.family == "xlnet" and architecture in HEADED_ARCHITECTURES:
        raise BertkitError(
            "XLNet's task models put <cls> last, a layout bertkit predict does not serve; an XLNet encoder exports "
            "(for bertkit embed), its fine-tuned models stay in PyTorch"
        )
    # The gate's data is read (and its labels checked) before the slow export, so bad input fails at once.
    scorer = GateScorer(meta, cfg, tokenizer, eval_file) if eval_file is not None else None

    if architecture in HEADED_ARCHITECTURES:
        model = build_task_model(architecture, meta, cfg, weights, str(model_dir))
        names = list(spec_of_architecture(architecture).outputs)
    else:
        from bertkit.engine.checkpoint import load_state
        from bertkit.modelio.modeldir import encoder_weights
        from bertkit.models.pooling import PooledEncoder
        from bertkit.models.pretraining import build_encoder

        encoder = build_encoder(cfg)
        load_state(encoder, encoder_weights(weights), str(model_dir))
        model = PooledEncoder(encoder).eval()
        names = ["mean", "cls"]
        embedding = meta.get("embedding")
        if embedding:  # a bi-encoder: its vectors as it was trained to give them, pooled and normalised in the graph
            pooling = trained_pooling(meta, model_dir) or "mean"
            model = _Embedding(model, pooling, bool(embedding.get("normalize"))).eval()
            names = ["mean", "cls", "sentence_embedding"]
    inputs = ["input_ids", "attention_mask"] + (["token_type_ids"] if cfg.type_vocab_size > 0 else [])
    max_len = cfg.max_position_embeddings - cfg.position_offset

    with atomic_output_dir(output, overwrite) as tmp, tempfile.TemporaryDirectory(dir=tmp.parent) as scratch:
        fp32 = Path(scratch) / "fp32.onnx"
        _trace(_GraphOutputs(model, names), inputs, names, fp32, opset, max_len, cfg.vocab_size)
        parity = check_parity(model, OnnxRunner(fp32), names, tokenizer, max_len)
        summary: dict[str, Any] = {"output": str(output), "source": str(model_dir), "architecture": architecture,
                                   "family": cfg.family, "quantize": quantize, "opset": opset, "inputs": inputs,
                                   "outputs": names, "parity_max_abs_diff": parity}  # fmt: skip
        if quantize == "int8":
            int8 = Path(scratch) / "int8.onnx"
            quantize_int8(fp32, int8)
            gate = scorer.gate(OnnxRunner(fp32), OnnxRunner(int8), max_drop) if scorer is not None else None
            if gate is None:
                # On stderr, and not silenced by --quiet: it concerns the result, not progress.
                sys.stderr.write(
                    "warning: the int8 model is unchecked: dynamic quantisation can cost accuracy (a few points, "
                    "or much more on some models); pass --eval FILE to score it against fp32 and refuse a loss over "
                    "--max-drop\n"
                )
            summary["gate"] = gate
            int8.replace(tmp / ONNX_GRAPH)
        else:
            fp32.replace(tmp / ONNX_GRAPH)
        tokenizer.save(tmp)
        onnx_meta = {key: value for key, value in summary.items() if key not in ("output",)}
        write_json_atomic(tmp / MODEL_META, {**meta, "format": ONNX_FORMAT, "onnx": onnx_meta})
        summary["bytes"] = (tmp / ONNX_GRAPH).stat().st_size
        summary["files"] = sorted(p.name for p in tmp.iterdir())
    return summary


class _Embedding(nn.Module):
    """A bi-encoder's graph outputs: the mean and [CLS] poolings, and `sentence_embedding`, its own pooling,
    normalised to unit length when the model was trained so (what sentence-transformers' Pooling and Normalize
    give)."""

    def __init__(self, pooled: nn.Module, pooling: str, normalize: bool) -> None:
        super().__init__()
        self.pooled, self.pooling, self.normalize = pooled, pooling, normalize

    def forward(self, *args: torch.Tensor) -> dict[str, torch.Tensor]:
        out = dict(self.pooled(*args))
        vector = out[self.pooling]
        out["sentence_embedding"] = torch.nn.functional.normalize(vector, dim=-1) if self.normalize else vector
        return out


def _trace(module: nn.Module, inputs: list[str], outputs: list[str], path: Path, opset: int, max_len: int,
           vocab: int) -> None:  # fmt: skip
    """Export with torch.export (`dynamo=True`). Both of torch 2.13's exporters give dynamic axes and the same
    outputs to 1e-7 on bertkit's encoders, but the TorchScript one (`dynamo=False`) is deprecated and warns that
    it "will be removed", and it traces by running the model once: shapes it computes from a tensor are frozen at
    the sample's values with only a warning. torch.export instead proves the graph valid for every batch size and
    every length up to the model's positions (the `Dim`s below), or fails the export."""
    import torch.onnx

    from bertkit.engine.unpad import configure_unpad

    # The padded path: unpadding's data-dependent token count (nonzero) and its `auto` branch do not export,
    # and ONNX Runtime serves fixed (batch, length) tensors anyway.
    configure_unpad(module, False)
    batch = torch.export.Dim("batch", min=1, max=4096)
    length = torch.export.Dim("sequence", min=1, max=max_len)
    # Sample sizes above 1 (and different from each other), so that neither axis is specialised to a constant.
    ids = torch.randint(0, vocab, (2, 8))
    sample = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
    sample["attention_mask"][1, 5:] = 0
    args = tuple(sample[name] for name in inputs)
    try:
        with warnings.catch_warnings(), quiet_loggers():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module.eval(), args, str(path), input_names=inputs, output_names=outputs, opset_version=opset,
                dynamo=True, external_data=False, optimize=True, verbose=False,
                dynamic_shapes={name: {0: batch, 1: length} for name in inputs},
            )  # fmt: skip
    except Exception as err:  # the exporter raises many types; any of them means: this model does not trace
        cause = err.__cause__ or err  # the exporter wraps torch.export's own error, which says what failed
        reason = (str(cause).strip().splitlines() or [""])[0]
        raise BertkitError(f"this model cannot be traced to ONNX ({type(cause).__name__}: {reason[:300]})") from None


def check_parity(model: nn.Module, runner: OnnxRunner, names: list[str], tokenizer: Any, max_len: int) -> float:
    """The largest |ONNX - PyTorch| over every output of three padded batches of different shapes, real token ids
    (a sample of English sentences encoded by the model's own tokenizer); above PARITY_TOLERANCE the export is
    refused, since the graph does not compute what the model computes."""
    from bertkit.corpus.loader import pad_batch

    texts = [
        "The film is a quiet triumph.",
        "A tedious, overlong mess with one good scene and a cast that deserved better material.",
        "Not bad.",
        "It rewards patience: the last act ties every thread together and the score is wonderful.",
        "Dull.",
    ]
    encoded = tokenizer.encode_batch(texts)
    ids = [np.asarray([tokenizer.cls_id, *t[: max_len - 2], tokenizer.sep_id]) for t in encoded]
    # And two rows at the model's full length (the sentences repeated), so that a model whose computation
    # changes with the length (a branch the trace recorded one side of) fails here, not in production.
    tokens = [token for t in encoded for token in t] * max_len
    long = np.asarray([tokenizer.cls_id, *tokens[: max_len - 2], tokenizer.sep_id])
    worst = 0.0
    with torch.no_grad():
        for rows in (ids[:2], ids[2:], [long, long[: max_len // 2]]):
            input_ids, mask = pad_batch(rows, tokenizer.pad_id)
            types = torch.zeros_like(input_ids)
            expected = model(input_ids, mask, types)
            try:
                got = runner(input_ids, mask, types)
            except Exception as err:  # onnxruntime's own exception types: the graph it was given does not run
                raise BertkitError(f"ONNX Runtime cannot run the exported graph ({str(err)[:300]})") from None
            for name in names:
                worst = max(worst, float((expected[name].float() - got[name]).abs().max()))
    if not worst <= PARITY_TOLERANCE:  # also catches NaN
        raise BertkitError(f"the ONNX graph differs from the PyTorch model by {worst:.2e} (over {PARITY_TOLERANCE}): "
                           "this model does not export faithfully; serve it with PyTorch")  # fmt: skip
    return worst
