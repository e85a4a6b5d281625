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


@guarded
def export_command(
    model: Path = typer.Argument(..., help="A bertkit run or model directory (from pretrain or finetune)."),
    to: str = typer.Option("hf", "--to", help="Target format; 'hf' (Hugging Face transformers) is supported."),
    output: Path = typer.Option(..., "--output", "-o", help="Directory to write."),
    head: str = typer.Option("auto", "--head", help=HEAD_HELP),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Write a trained model as a Hugging Face checkpoint (config.json, model.safetensors, tokenizer)."""
    from bertkit.errors import BertkitError
    from bertkit.interop.export import export_hf

    if to != "hf":
        raise BertkitError(f"--to {to} is not supported; use --to hf")
    emit(export_hf(model, output, head, overwrite), json_out, "export done")
