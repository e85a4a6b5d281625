"""`bertkit quickstart`: the whole pipeline on real sample text, small enough for a laptop CPU."""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any

from bertkit.config.recipe import load_distill_recipe, load_recipe
from bertkit.corpus.build import BuildOptions, build_corpus
from bertkit.data.samples import write_sample_data
from bertkit.errors import BertkitError
from bertkit.export.onnx import export_onnx
from bertkit.fsutil import check_output_dir
from bertkit.pipelines.compress import CompressOptions, compress
from bertkit.pipelines.distill.general import distill_general
from bertkit.pipelines.finetune.run import finetune
from bertkit.pipelines.predict.speed import speed_table
from bertkit.pipelines.pretrain import pretrain
from bertkit.pipelines.quickstart_data import split_reviews
from bertkit.progress import stderr_console
from bertkit.tokenizers.train import train_tokenizer


def quickstart(
    output: Path,
    overwrite: bool = False,
    quiet: bool = False,
    pretrain_steps: int | None = None,
    finetune_steps: int | None = None,
    distill_steps: int = 100,
) -> dict[str, Any]:
    import shutil

    for option, steps in (("--pretrain-steps", pretrain_steps), ("--finetune-steps", finetune_steps)):
        if steps is not None and steps < 1:
            raise BertkitError(f"{option} must be at least 1, not {steps}")
    check_output_dir(output, overwrite)
    if output.exists():
        shutil.rmtree(output)
    started = time.perf_counter()

    def say(message: str) -> None:
        if not quiet:
            stderr_console.print(f"[bold cyan]quickstart[/] {message}")

    seconds: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(stage: str) -> None:
        """Seconds since the previous stage ended: what each stage costs, for the summary table."""
        nonlocal clock
        now = time.perf_counter()
        seconds[stage] = round(now - clock, 1)
        clock = now

    say("writing sample data (Python's documentation, movie plots, Rotten Tomatoes reviews)")
    data = write_sample_data(output / "data")
    say("training a WordPiece tokenizer")
    tok = train_tokenizer("wordpiece", [data["pretrain"]], output / "tokenizer", vocab_size=8000)
    lap("tokenizer")  # with the sample data it trains on
    say("building a FULL-SENTENCES corpus (dynamic 15% masking)")
    corpus = build_corpus([data["pretrain"]], output / "tokenizer", output / "corpus", BuildOptions(max_seq_len=128))
    lap("corpus")
    pre_overrides = [f"data.train={output / 'corpus'}"]
    if pretrain_steps is not None:
        pre_overrides.append(f"train.steps={pretrain_steps}")
    say("pretraining a tiny BERT with masked language modelling")
    pre = pretrain(load_recipe("bert-tiny", pre_overrides), output / "pretrain", quiet=quiet)  # type: ignore[arg-type]
    lap("pretrain")
    say("distilling it into a 1-layer student (DistilBERT: soft targets + MLM + cosine)")
    distill_overrides = [f"data.train={output / 'corpus'}", "model.num_layers=1", f"train.steps={distill_steps}"]
    distilled = distill_general(
        load_distill_recipe("bert-tiny", None, distill_overrides), str(output / "pretrain"), output / "distill",
        "bert-tiny", quiet=quiet,
    )  # fmt: skip
    lap("distill")
    say("fine-tuning the pretrained model on Rotten Tomatoes sentiment")
    splits = split_reviews(data["sentiment"], output / "data")
    ft_overrides = [f"train.steps={finetune_steps}"] if finetune_steps is not None else []
    ft = finetune(
        load_recipe("finetune-tiny", ft_overrides),
        output / "pretrain",
        splits["train"],
        output / "finetune",
        splits["eval"],
        quiet=quiet,
    )  # type: ignore[arg-type]
    lap("finetune")
    say("compressing the fine-tuned model into a 1-layer one (copy, augment, distil, gold-label baseline)")
    # Budgeted for a laptop: 2,000 of the training reviews, 2 augmented copies each, 2 epochs of the prediction
    # layer (the copied student skips the intermediate phase).
    compressed = compress(
        str(output / "finetune"), splits["compress"], splits["eval"], output / "compress",
        CompressOptions(layers=1, copies=2, overrides=["distill.prediction.epochs=2"]), quiet=quiet,
    )  # fmt: skip
    lap("compress")
    onnx_summary = serve_int8(Path(compressed.model_dir), output / "finetune", splits["eval"], output, say)
    lap("onnx")
    return {
        "tokenizer": {"path": tok["output"], "vocab_size": tok["vocab_size"]},
        "corpus": {"path": corpus["output"], "sequences": corpus["num_sequences"], "tokens": corpus["num_tokens"]},
        "pretrain": pre.as_json(),
        "distill": distilled.as_json(),
        "finetune": ft.as_json(),
        "compress": compressed.as_json(),
        "onnx": onnx_summary,
        "stage_seconds": seconds,
        "seconds": round(time.perf_counter() - started, 1),
    }


def serve_int8(student: Path, teacher: Path, held_out_file: Path, output: Path, say: Any) -> dict[str, Any]:
    """The last stage: the compressed student exported to ONNX int8 (gated on the held-out reviews), timed against
    the fine-tuned model it was distilled from (the teacher, in PyTorch), one thread each: the speed-up of the
    whole path, distillation then quantisation. Without the onnx extra the stage is skipped, saying so."""
    from bertkit.errors import BertkitError
    from bertkit.export.onnx_runtime import require_onnx

    try:
        require_onnx()
    except BertkitError as err:
        say(f"skipping the ONNX stage: {err}")
        return {"skipped": str(err)}
    say("exporting the compressed student to ONNX int8 (gated on the held-out reviews) and timing it")
    exported = export_onnx(student, output / "onnx-int8", "int8", held_out_file)
    with open(held_out_file, encoding="utf-8", newline="") as handle:
        held_out = list(csv.DictReader(handle))
    timed = speed_table([("teacher", teacher), ("int8 student", output / "onnx-int8")],
                        [r["text"] for r in held_out], [r["label"] for r in held_out], threads=1)  # fmt: skip
    teacher_row, student_row = timed
    speedup = {size: round(student_row["sentences_per_s"][size] / teacher_row["sentences_per_s"][size], 1)
               for size in student_row["sentences_per_s"]}  # fmt: skip
    return {**exported, "timing": timed, "speedup": speedup}
