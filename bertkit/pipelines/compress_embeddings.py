"""`bertkit compress` for a bi-encoder (a retrieval model, a sentence-transformers directory): a copy of N of the
teacher's layers trained on (query, positive) pairs two ways, with the table to decide by.

    teacher (bi-encoder) ── copy N of its layers ─┬─ ranking loss alone ──────────────────────── baseline/
                                                  └─ ranking loss + the teacher's vectors (MSE) ── distill/ -> model/

The distilled student learns the teacher's vector of every training text (computed once) beside the ranking loss,
and with `--set task.cross_encoder=DIR` (pairs with hard negatives) a cross-encoder's margins too (MarginMSE);
the baseline is what a user would otherwise run, the same copy fine-tuned on the pairs alone. The table: parameters,
texts/s embedding the evaluation set's texts (batch INFER_BATCH, at most INFER_MAX_LEN tokens, timed in interleaved
rounds), nDCG@10 (and MRR@10, Recall@100) by exact search over the evaluation set, and % of the teacher's nDCG@10.
"""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from bertkit.errors import BertkitError
from bertkit.fsutil import check_output_dir
from bertkit.pipelines.summary import BiEncoderCompressSummary, write_compress_summary
from bertkit.progress import stderr_console


def compress_bi_encoder(teacher_spec: str, train_file: Path, eval_file: Path, output: Path, opts: Any,
                        overwrite: bool, quiet: bool, started: float) -> BiEncoderCompressSummary:  # fmt: skip
    from bertkit.config.recipe import load_recipe
    from bertkit.distill.teacher import Teacher
    from bertkit.modelio.modeldir import load_model_dir
    from bertkit.pipelines.compress_common import (
        INFER_BATCH,
        INFER_MAX_LEN,
        check_layers,
        copy_layers,
        relative_to_teacher,
    )
    from bertkit.pipelines.finetune.run import finetune

    if opts.student is not None:
        raise BertkitError("--student applies to classifiers; a bi-encoder's student is a copy of its layers")
    teacher_dir, meta, cfg, _, _ = load_model_dir(teacher_spec, hub=True)
    check_layers(opts.layers, cfg.num_layers)
    for path in (train_file, eval_file):
        if not Path(path).exists():
            raise BertkitError(f"{path} not found")
    from bertkit.modelio.st_dir import trained_pooling

    # A copy of a few layers moves further than a fine-tuned model: 1e-4 (TinyBERT's student rate) for 3 epochs. On
    # 6,000 SQuAD pairs a 2-layer copy of all-MiniLM-L6-v2 scored 0.746 nDCG@10 at 1e-4 against 0.688 at the
    # recipe's 2e-5, and 0.771 in 3 epochs against 0.746 in the recipe's 1 (distilled: 0.752 against 0.744).
    settings = [f"task.pooling={trained_pooling(meta, teacher_dir) or 'mean'}", "task.normalize=true", "optim.lr=1e-4",
                "train.epochs=3", f"train.seed={opts.seed}", *opts.overrides]  # fmt: skip
    # The baseline learns from the pairs alone: no cross-encoder either (`--set task.cross_encoder=DIR` teaches the
    # distilled copy the cross-encoder's margins too).
    baseline_recipe = load_recipe("finetune-retrieval", [*settings, "task.cross_encoder=null",
                                                         *opts.baseline_overrides], kind="finetune")  # fmt: skip
    distill_recipe = load_recipe("finetune-retrieval", [*settings, f"task.teacher={teacher_dir}"], kind="finetune")
    check_output_dir(output, overwrite)
    if output.exists() and overwrite:
        shutil.rmtree(output)
    output.mkdir(parents=True)
    seconds: dict[str, float] = {}

    def say(message: str) -> None:
        if not quiet:
            stderr_console.print(f"[bold]compress[/bold] {message}")

    try:
        begin = time.perf_counter()
        copy_layers(Teacher.load(str(teacher_dir)), opts.layers, output / "student")
        student = output / "student" / "model"
        say(f"student: {opts.layers} layers copied from the teacher into {student}")
        seconds["student"] = round(time.perf_counter() - begin, 1)
        begin = time.perf_counter()
        say("distilling: the ranking loss and the teacher's vectors")
        distilled = finetune(distill_recipe, student, Path(train_file), output / "distill", Path(eval_file),  # type: ignore[arg-type]
                             quiet=quiet)  # fmt: skip
        seconds["distill"] = round(time.perf_counter() - begin, 1)
        baseline = None
        if opts.baseline:
            begin = time.perf_counter()
            say("baseline: the same student trained on the pairs alone")
            baseline = finetune(baseline_recipe, student, Path(train_file), output / "baseline", Path(eval_file),  # type: ignore[arg-type]
                                quiet=quiet)  # fmt: skip
            seconds["baseline"] = round(time.perf_counter() - begin, 1)
        begin = time.perf_counter()
        say("timing inference and scoring every model on the evaluation set")
        models = [("teacher", Path(teacher_dir))]
        if baseline is not None:
            models.append(("student, pairs only", Path(str(baseline.model_dir))))
        models.append(("student, distilled", Path(str(distilled.model_dir))))
        rows = compare_bi_encoders(models, Path(eval_file), distill_recipe, INFER_BATCH, INFER_MAX_LEN)
        seconds["table"] = round(time.perf_counter() - begin, 1)
        relative_to_teacher(rows, "texts_per_s", "ndcg@10")
        shutil.copytree(Path(str(distilled.model_dir)), output / ".model.tmp")
        (output / ".model.tmp").rename(output / "model")
        summary = BiEncoderCompressSummary(
            run_dir=str(output),
            model_dir=str(output / "model"),
            teacher=str(teacher_dir),
            student=str(student),
            layers=opts.layers,
            train_pairs=distilled.kind_entry("train_pairs"),
            eval_set=distilled.kind_entry("eval_set"),
            inference={"batch_size": INFER_BATCH, "max_length": INFER_MAX_LEN, "threads": torch.get_num_threads(),
                       "device": "cpu"},  # fmt: skip
            rows=rows,
            stage_seconds=seconds,
            seconds=round(time.perf_counter() - started, 1),
            beats_baseline=rows[-1]["ndcg@10"] > rows[1]["ndcg@10"] if baseline is not None else None,
        )
        write_compress_summary(output, summary)
        return summary
    except BaseException:
        shutil.rmtree(output, ignore_errors=True)
        raise


def compare_bi_encoders(models: list[tuple[str, Path]], eval_file: Path, recipe: Any, batch_size: int, max_len: int,
                        rounds: int = 3) -> list[dict[str, Any]]:  # fmt: skip
    """Each model's retrieval metrics on the evaluation set, and its texts/s embedding the set's queries and
    documents (at most `max_len` tokens, `batch_size` at a time; a warm-up, then `rounds` interleaved timed passes,
    each model keeping its best)."""
    from bertkit.corpus.loader import pad_batch
    from bertkit.engine.checkpoint import load_state
    from bertkit.modelio.modeldir import encoder_weights, load_model_dir
    from bertkit.models.pretraining import build_encoder
    from bertkit.models.sentence import SentenceEncoder
    from bertkit.tasks.kinds import task_kind
    from bertkit.tasks.kinds.embedding import checkpoint_task
    from bertkit.tasks.retrieval.search import encode_texts

    loaded = []
    for name, path in models:
        model_dir, meta, cfg, weights, tokenizer = load_model_dir(path)
        task = checkpoint_task(recipe.task.model_copy(update={"teacher": None}), meta)
        model = SentenceEncoder(build_encoder(cfg), "mean" if task.pooling == "auto" else task.pooling, True)
        load_state(model.encoder, encoder_weights(weights), str(model_dir))
        model.eval()
        scorer = task_kind("retrieval").scorer(task, cfg, tokenizer, eval_file)
        metrics = scorer.evaluate(model, torch.device("cpu"))
        texts = [*scorer.data.queries, *scorer.data.docs]
        ids = sorted(encode_texts(texts, tokenizer, max_len), key=len)
        batches = [pad_batch(ids[i : i + batch_size], tokenizer.pad_id) for i in range(0, len(ids), batch_size)]
        params = sum(p.numel() for p in model.encoder.parameters())
        loaded.append({"name": name, "path": str(path), "model": model, "batches": batches, "metrics": metrics,
                       "params": params, "texts": len(texts), "best": math.inf})  # fmt: skip
    with torch.inference_mode():
        for item in loaded:
            for batch in item["batches"][:2]:
                item["model"](*batch)
        for _ in range(rounds):
            for item in loaded:
                begin = time.perf_counter()
                for batch in item["batches"]:
                    item["model"](*batch)
                item["best"] = min(item["best"], time.perf_counter() - begin)
    return [{"model": item["name"], "path": item["path"], "parameters": item["params"],
             "texts_per_s": round(item["texts"] / item["best"], 1),
             **{k: item["metrics"][k] for k in ("ndcg@10", "mrr@10", "recall@100", "map@100")}}
            for item in loaded]  # fmt: skip
