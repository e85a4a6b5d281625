"""`bertkit quickstart`."""

from __future__ import annotations

from pathlib import Path

import typer

from bertkit.cli.common import JSON_HELP, OVERWRITE_HELP, QUIET_HELP, emit, guarded


@guarded
def quickstart_command(
    output: Path = typer.Option(Path("runs/quickstart"), "--output", "-o", help="Where everything is written."),
    pretrain_steps: int | None = typer.Option(None, "--pretrain-steps", help="Override the tiny recipe's steps."),
    finetune_steps: int | None = typer.Option(None, "--finetune-steps", help="Override the fine-tuning steps."),
    data_only: bool = typer.Option(
        False,
        "--data-only",
        help="Only write the sample data (OUTPUT/data: pretrain.txt and the review splits), "
        "to walk through the commands one by one as docs/getting-started.md does.",
    ),  # fmt: skip
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Tokenizer -> corpus -> pretraining -> distillation -> fine-tuning -> compression -> ONNX int8 export on
    bundled real text, then a summary table."""
    import json

    if data_only:
        from bertkit.pipelines.quickstart_data import sample_data

        emit(sample_data(output, overwrite), json_out, "sample data written")
        return
    from bertkit.pipelines.quickstart import quickstart

    result = quickstart(output, overwrite, quiet, pretrain_steps, finetune_steps)
    if json_out:
        print(json.dumps(result, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    pre, ft = result["pretrain"], result["finetune"]
    table = Table(title="bertkit quickstart", title_justify="left")
    table.add_column("stage", style="bold")
    table.add_column("result")
    table.add_column("seconds", justify="right")
    table.add_column("written to")
    # Each stage's own time (the tokenizer's includes writing the sample data), so a slow stage shows.
    seconds = {stage: f"{value:.1f}" for stage, value in result["stage_seconds"].items()}
    table.add_row(
        "tokenizer", f"WordPiece, {result['tokenizer']['vocab_size']:,} tokens", seconds["tokenizer"],
        result["tokenizer"]["path"],
    )  # fmt: skip
    table.add_row(
        "corpus",
        f"{result['corpus']['sequences']:,} sequences, {result['corpus']['tokens']:,} tokens",
        seconds["corpus"],
        result["corpus"]["path"],
    )
    table.add_row(
        "pretrain",
        f"{pre['parameters']:,} parameters; MLM loss {pre['loss_first']:.3f} -> "
        f"{pre['loss_last']:.3f} in {pre['steps']} steps; held-out MLM acc {pre['eval'].get('mlm_acc')}",
        seconds["pretrain"],
        pre["model_dir"],
    )
    distilled = result["distill"]
    held_out = distilled["eval"]
    table.add_row(
        "distill",
        f"{distilled['student_parameters']:,}-parameter 1-layer student of the {distilled['teacher_parameters']:,}-"
        f"parameter model, from its layer 0; {distilled['steps']} steps; held-out soft-target KL "
        f"{held_out.get('ce_loss')}, MLM loss {held_out.get('mlm_loss')}, 1 - cosine {held_out.get('cos_loss')}",
        seconds["distill"],
        distilled["model_dir"],
    )
    epochs = f"{ft['epochs']} epochs ({ft['steps']} steps)" if ft.get("epochs") else f"{ft['steps']} steps"
    table.add_row(
        "finetune",
        f"sentiment accuracy {ft['eval'].get('accuracy')} (macro-F1 {ft['eval'].get('macro_f1')}) "
        f"on {ft['eval_examples']:,} held-out reviews after {epochs}; loss {ft['loss_first']:.3f} -> "
        f"{ft['loss_last']:.3f}",
        seconds["finetune"],
        ft["model_dir"],
    )
    compressed = result["compress"]
    teacher, baseline, student = compressed["rows"]
    table.add_row(
        "compress",
        f"1-layer student ({student['parameters']:,} parameters, {student['speedup']:.1f}x the fine-tuned model's "
        f"sentences/s): accuracy {student['accuracy']:.3f} = {student['percent_of_teacher']:.1f}% of the fine-tuned "
        f"model's {teacher['accuracy']:.3f}; the same copy on gold labels alone {baseline['accuracy']:.3f}",
        seconds["compress"],
        compressed["model_dir"],
    )
    onnx = result["onnx"]
    if "skipped" in onnx:
        table.add_row("onnx int8", f"skipped: {onnx['skipped']}", seconds["onnx"], "")
    else:
        gate, teacher_speed, student_speed = onnx["gate"], *(row["sentences_per_s"] for row in onnx["timing"])
        table.add_row(
            "onnx int8",
            f"{onnx['output']}, the compressed student as ONNX int8 ({onnx['bytes'] / 2**20:.1f} MB): "
            f"{student_speed['1']:.0f} sentences/s at batch 1 = {onnx['speedup']['1']:.1f}x the fine-tuned model's "
            f"{teacher_speed['1']:.0f} in PyTorch ({onnx['speedup']['32']:.1f}x at batch 32; 1 thread); held-out "
            f"accuracy {gate['int8'] / 100:.3f} (its worse of batch 1 and 32; fp32 {gate['fp32'] / 100:.3f})",
            seconds["onnx"],
            onnx["output"],
        )
    table.add_row("total", "", f"{result['seconds']:.1f}", str(output))
    Console().print(table)
