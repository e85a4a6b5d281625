"""`bertkit export`."""

from __future__ import annotations

from pathlib import Path

import typer

from bertkit.cli.common import JSON_HELP, OVERWRITE_HELP, QUIET_HELP, emit, guarded

HEAD_HELP = (
    "Which Hugging Face class the checkpoint is for: auto (the default: classifier for a fine-tuned run, else "
    "pretraining), classifier (AutoModelForSequenceClassification / AutoModelForTokenClassification / "
    "AutoModelForQuestionAnswering, for runs of "
    "bertkit finetune), pretraining (AutoModelForPreTraining), "
    "mlm (AutoModelForMaskedLM), base (AutoModel) or, for ELECTRA, generator (ElectraForMaskedLM)."
)


TARGETS = ("hf", "onnx", "sentence-transformers")  # --to


@guarded
def export_command(
    model: Path = typer.Argument(
        ..., help="A bertkit run or model directory (pretrain, distill, finetune), or a local Hugging Face checkpoint."
    ),
    to: str = typer.Option(
        "hf",
        "--to",
        metavar="hf|onnx|sentence-transformers",
        help="hf: a Hugging Face transformers checkpoint; onnx: an ONNX graph; sentence-transformers: a directory "
        "SentenceTransformer(DIR) loads, pooled and normalised as the model was trained.",
    ),
    output: Path = typer.Option(..., "--output", "-o", help="Directory to write."),
    head: str = typer.Option(
        "auto", "--head", metavar="auto|pretraining|mlm|base|generator|classifier", help=HEAD_HELP
    ),
    quantize: str = typer.Option(
        "none", "--quantize", metavar="none|int8", help="onnx: int8 is ONNX Runtime's dynamic quantisation."
    ),
    eval_file: Path | None = typer.Option(
        None, "--eval", help="onnx, int8: a labelled file (as for finetune --eval) to score fp32 and int8 on."
    ),
    max_drop: float = typer.Option(
        1.0, "--max-drop", help="onnx, int8 with --eval: refuse if int8 loses more points of the task metric."
    ),
    opset: int = typer.Option(18, "--opset", help="onnx: the ONNX opset to target, 17 to 22."),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Write a trained model as a Hugging Face checkpoint (config.json, model.safetensors, tokenizer) or as an ONNX
    directory for `bertkit predict`/`embed` on ONNX Runtime (model.onnx, tokenizer, bertkit_model.json)."""
    from bertkit.errors import BertkitError

    if to == "onnx":
        from bertkit.export.onnx import export_onnx

        if head != "auto":
            raise BertkitError("--head applies to --to hf; an ONNX export keeps a fine-tuned model's task head")
        emit(export_onnx(model, output, quantize, eval_file, max_drop, opset, overwrite), json_out, "export done")
        return
    if to not in TARGETS:
        raise BertkitError(f"--to {to} is not supported; use --to {', --to '.join(TARGETS)}")
    if quantize != "none" or eval_file is not None:
        raise BertkitError("--quantize and --eval apply to --to onnx")
    if to == "sentence-transformers":
        from bertkit.export.sentence_transformers import export_sentence_transformers

        if head != "auto":
            raise BertkitError("--head applies to --to hf, not to a sentence-transformers export")
        emit(export_sentence_transformers(model, output, overwrite), json_out, "export done")
        return
    from bertkit.export.hf import export_hf

    emit(export_hf(model, output, head, overwrite), json_out, "export done")
