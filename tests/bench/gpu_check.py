"""The GPU check: one command that measures what a user pretraining on a GPU needs to know, and writes records.

    python tests/bench/gpu_check.py [--output results] [--dry-run] [--minutes 7.5]

In order, each part writing its record under OUTPUT/gpu-check/ as soon as it is done (so a part that does not
finish writes nothing, and the parts before it are kept):
1. the `gpu`-marked correctness tests (pytest -m gpu), their counts;
2. pretraining throughput of the recipes `bert-base`, `crammed-bert` (12 x 768) and `modernbert-base` at 128 and
   then at 1,024 tokens, in bf16: bertkit's `pretrain` eager and with `engine.compile=true`, beside transformers in
   the same process (`BertForMaskedLM` with SDPA for bert-base, `ModernBertForMaskedLM` for the ModernBERT-layer
   recipes, built from bertkit's own export of the configuration) in a plain loop over the same batches: tokens/s,
   MFU against the GPU's datasheet peak (bertkit's FLOP count for both sides) and peak memory;
3. fine-tuning (`finetune-classification` on Rotten Tomatoes reviews, from the bert-base run) and general
   distillation (`distilbert` from the bert-base run): tokens/s, MFU, peak memory.
A part that would start after --minutes is left out, and said so.

The text is Python's own documentation (stdlib `pydoc_data`), with a WordPiece vocabulary trained on it, so the
check needs no download: on a GPU machine without network, `make gpu-check` runs it from the checkout with the
machine's own torch and transformers. With --dry-run the same code runs on the CPU at a tiny shape (2 layers,
hidden 64, a few steps) in about a minute and marks its records `dry_run`; the test suite runs it so the script
never rots. Dry-run figures mean nothing and no page quotes them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(HERE.parent), str(ROOT)]

from records import figure, write_record  # noqa: E402

RECIPES = {"bert-base": "BertForMaskedLM (SDPA)", "crammed-bert": "ModernBertForMaskedLM",
           "modernbert-base": "ModernBertForMaskedLM"}  # fmt: skip
# MLM alone on every side: transformers' *ForMaskedLM has no NSP head, so bert-base's NSP is switched off.
RECIPE_SETTINGS = {"bert-base": ["objective.nsp=0"]}
SEQS = (128, 1024)
# Tokens per optimizer step, the same at either length: batch 128 x 128 or 16 x 1,024.
TOKENS_PER_STEP = 16384
WARMUP_STEPS, TIMED_STEPS = 5, 10
TINY = {"model.num_layers": 2, "model.hidden_size": 64, "model.num_heads": 2}
TINY_FFN = {"bert": 128, "modernbert": 96}
GPU_TEST_FILES = ("tests/unit/test_repeatable.py", "tests/unit/test_engine_loop.py", "tests/e2e/test_distributed.py",
                  "tests/e2e/test_ner_predict.py")  # fmt: skip
COMMAND = "make gpu-check"


class Check:
    """What every part shares: the device, precision, the deadline, the work folder and where records go."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch

        self.dry_run = args.dry_run
        if not self.dry_run and not torch.cuda.is_available():
            raise SystemExit("error: no CUDA device here; run with --dry-run to check the script on the CPU")
        self.device = "cuda" if torch.cuda.is_available() and not self.dry_run else "cpu"
        self.precision = "bf16" if self.device == "cuda" else "fp32"
        self.deadline = time.monotonic() + 60 * args.minutes
        self.work = Path(args.work)
        self.output = Path(args.output) / "gpu-check"
        self.steps = (2, 2) if self.dry_run else (WARMUP_STEPS, TIMED_STEPS)
        self.written: list[Path] = []
        self.left_out: list[str] = []

    def time_left(self, part: str) -> bool:
        if time.monotonic() < self.deadline:
            return True
        self.left_out.append(part)
        print(f"[gpu-check] out of time: {part} left out", flush=True)
        return False

    def record(self, part: str, settings: dict[str, Any], figures: dict[str, dict[str, Any]]) -> None:
        command = COMMAND if not self.dry_run else "python tests/bench/gpu_check.py --dry-run"
        path = write_record(f"gpu-check-{part}", command, settings, figures, self.precision, self.output,
                            dry_run=self.dry_run)  # fmt: skip
        self.written.append(path)
        shown = ", ".join(f"{k} {v['value']:,.4g} {v['unit']}" for k, v in figures.items())
        print(f"[gpu-check] {part}: {shown}", flush=True)

    def overrides(self, family: str) -> list[str]:
        if not self.dry_run:
            return []
        return [f"{k}={v}" for k, v in TINY.items()] + [f"model.intermediate_size={TINY_FFN[family]}"]


# ------------------------------------------------------------------------------------------------ 1. gpu tests


def gpu_tests(check: Check) -> None:
    """The `gpu`-marked tests, in the files that hold them; on the CPU they are collected and skipped."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                           *GPU_TEST_FILES], cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", done.stdout)}
    if done.returncode not in (0, 5) and not counts.get("failed"):
        raise SystemExit(f"error: pytest -m gpu did not run ({done.stdout[-400:]}{done.stderr[-400:]})")
    check.record("tests", {"files": list(GPU_TEST_FILES), "marker": "gpu"}, {
        "passed": figure(counts.get("passed", 0), "tests"),
        "failed": figure(counts.get("failed", 0), "tests"),
        "skipped": figure(counts.get("skipped", 0), "tests"),
        "seconds": figure(round(time.monotonic() - started, 1), "s"),
    })  # fmt: skip
    if counts.get("failed"):
        print(done.stdout[-3000:], flush=True)


# ------------------------------------------------------------------------------------------------ data


def prepare(check: Check) -> dict[str, Path]:
    """Python's documentation as text, a WordPiece vocabulary trained on it, one corpus per sequence length."""
    from bertkit.corpus.build import BuildOptions, build_corpus
    from bertkit.data.samples import python_docs_documents
    from bertkit.tokenizers.train import train_tokenizer

    check.work.mkdir(parents=True, exist_ok=True)
    text = check.work / "python-docs.txt"
    text.write_text("\n\n".join("\n".join(doc) for doc in python_docs_documents()) + "\n", "utf-8")
    tokenizer = check.work / "tokenizer"
    if not tokenizer.exists():
        train_tokenizer("wordpiece", [text], tokenizer, vocab_size=30522 if not check.dry_run else 4000)
    paths = {"tokenizer": tokenizer}
    for seq in SEQS:
        corpus = check.work / f"corpus-{seq}"
        if not corpus.exists():
            build_corpus([text], tokenizer, corpus, BuildOptions(max_seq_len=seq))
        paths[f"corpus-{seq}"] = corpus
    return paths


def last_window(run: Path) -> dict[str, Any]:
    """The last logged training window of a run (metrics.jsonl): the timed steps after the warm-up window."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text("utf-8").splitlines() if line.strip()]
    timed = [row for row in rows if row.get("tokens_per_s")]
    if not timed:
        raise SystemExit(f"error: {run}/metrics.jsonl has no timed window")
    return timed[-1]


def peak_memory_gib() -> float | None:
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if torch.cuda.is_available() else None


def reset_peak_memory() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def training_settings(check: Check, batch: int) -> list[str]:
    warm, timed = check.steps
    # Logged every `warm` steps: the first window holds the warm-up (compilation, allocation), the last a timed one.
    return [f"train.steps={warm + timed}", f"train.log_every={warm}",
            f"train.batch_size={batch}", "train.grad_accum=1", "train.batch_ramp=0", "train.budget=null",
            "train.eval_every=0", "train.eval_every_share=0", "train.eval_batches=1", "train.checkpoint_every=0",
            f"engine.precision={check.precision}", "engine.tensorboard=false"]  # fmt: skip


# ------------------------------------------------------------------------------------------------ 2. pretraining


def bertkit_pretrain(check: Check, recipe: str, corpus: Path, seq: int, batch: int, compiled: bool,
                     out: Path) -> tuple[dict[str, Any], Any]:  # fmt: skip
    from bertkit.config.recipe import load_recipe
    from bertkit.pipelines.pretrain import pretrain
    from bertkit.tokenizers.base import load_tokenizer

    family = load_recipe(recipe).model.family  # type: ignore[union-attr]
    tokenizer = load_tokenizer(corpus / "tokenizer")
    overrides = [f"data.train={corpus}", f"model.vocab_size={tokenizer.vocab_size}",
                 f"model.pad_token_id={tokenizer.pad_id}", f"model.max_position_embeddings={max(seq, 128)}",
                 f"engine.compile={'true' if compiled else 'false'}", *training_settings(check, batch),
                 *check.overrides(family), *RECIPE_SETTINGS.get(recipe, [])]  # fmt: skip
    if family == "modernbert":
        overrides.append(f"model.local_attention={min(seq, 128)}")
    loaded = load_recipe(recipe, overrides)
    reset_peak_memory()
    pretrain(loaded, out, overwrite=True, quiet=True)  # type: ignore[arg-type]
    row = last_window(out)
    return {"tokens_per_s": row["tokens_per_s"], "mfu": row.get("mfu"), "peak_gib": peak_memory_gib()}, loaded


def transformers_pretrain(check: Check, recipe: Any, corpus: Path, batch: int) -> dict[str, Any]:
    """transformers' masked LM of the same configuration (bertkit's export of it) in a plain loop over BERT-masked
    batches of the same corpus: AdamW, clipping, autocast as bertkit's precision."""
    import torch
    import transformers
    from bench_helpers import mlm_batches

    from bertkit.engine.flops import peak_flops, training_flops
    from bertkit.interop.hf import config_to_hf

    hf = config_to_hf(recipe.model)
    model_type = hf.pop("model_type")
    name = {"bert": "Bert", "modernbert": "ModernBert"}[model_type]
    config = getattr(transformers, f"{name}Config")(**hf, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = getattr(transformers, f"{name}ForMaskedLM")(config).to(check.device)
    model.train()
    source, _ = mlm_batches(corpus, batch)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    autocast = torch.autocast(device_type=check.device, dtype=torch.bfloat16, enabled=check.precision == "bf16")
    warm, timed = check.steps
    reset_peak_memory()
    tokens, start, seq = 0, 0.0, 0.0
    for step in range(warm + timed):
        if step == warm:
            if check.device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
        batch_ = {k: v.to(check.device) for k, v in source.next_batch().items()}
        labels = torch.full(batch_["input_ids"].shape, -100, dtype=torch.long, device=check.device)
        labels.view(-1)[batch_["mlm_positions"]] = batch_["mlm_labels"]
        with autocast:
            loss = model(input_ids=batch_["input_ids"], attention_mask=batch_["attention_mask"], labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= warm:
            tokens += int(batch_["attention_mask"].sum())
            seq = tokens / ((step - warm + 1) * batch_["input_ids"].shape[0])
    if check.device == "cuda":
        torch.cuda.synchronize()
    tps = tokens / (time.perf_counter() - start)
    mfu = training_flops(model, int(tps), seq) / peak_flops(torch.device(check.device), check.precision)
    return {"tokens_per_s": round(tps, 1), "mfu": float(f"{mfu:.3g}"), "peak_gib": peak_memory_gib()}


def pretraining(check: Check, paths: dict[str, Path], seq: int) -> Path | None:
    """Every recipe at one sequence length; the bert-base eager run's folder (the later parts start from it)."""
    bert_base = None
    batch = max(TOKENS_PER_STEP // seq, 1) if not check.dry_run else 4
    for recipe, reference in RECIPES.items():
        if not check.time_left(f"{recipe} at {seq} tokens"):
            continue
        sides, loaded = {}, None
        # A dry run compiles one recipe at one length: torch.compile on a CPU costs a minute a model.
        for compiled in (False, True) if not check.dry_run or (recipe, seq) == ("bert-base", SEQS[0]) else (False,):
            side = "compiled" if compiled else "eager"
            out = check.work / f"{recipe}-{seq}-{side}"
            sides[side], loaded = bertkit_pretrain(check, recipe, paths[f"corpus-{seq}"], seq, batch, compiled, out)
            if (recipe, compiled) == ("bert-base", False):
                bert_base = out
        sides["transformers"] = transformers_pretrain(check, loaded, paths[f"corpus-{seq}"], batch)
        figures = {}
        for side, measured in sides.items():
            owner = "bertkit" if side != "transformers" else f"transformers {reference}"
            figures[f"{side}_tokens_per_s"] = figure(measured["tokens_per_s"], "tokens/s", owner)
            if measured["mfu"] is not None:
                figures[f"{side}_mfu"] = figure(round(100 * measured["mfu"], 2), "%", owner)
            if measured["peak_gib"] is not None:
                figures[f"{side}_peak_memory"] = figure(measured["peak_gib"], "GiB", owner)
        best = max(measured["tokens_per_s"] for side, measured in sides.items() if side != "transformers")
        figures["speedup_vs_transformers"] = figure(round(best / sides["transformers"]["tokens_per_s"], 2), "x")
        settings = {"recipe": recipe, "seq_len": seq, "batch_size": batch, "warmup_steps": check.steps[0],
                    "timed_steps": check.steps[1], "reference": f"transformers {reference}",
                    "recipe_settings": RECIPE_SETTINGS.get(recipe, []),
                    "text": "Python's documentation (pydoc_data), WordPiece trained on it"}  # fmt: skip
        check.record(f"pretrain-{recipe}-{seq}", settings, figures)
    return bert_base


# ------------------------------------------------------------------------------------------------ 3. finetune, distill


def fine_tuning(check: Check, teacher: Path) -> None:
    from bertkit.config.recipe import load_recipe
    from bertkit.data.samples import write_sample_data
    from bertkit.pipelines.finetune.run import finetune
    from bertkit.pipelines.quickstart_data import split_reviews

    data = write_sample_data(check.work / "reviews", max_reviews=3000)
    splits = split_reviews(data["sentiment"], check.work / "reviews")
    batch = 128 if not check.dry_run else 8
    out = check.work / "finetune"
    reset_peak_memory()
    overrides = [*training_settings(check, batch), "task.max_seq_len=128"]
    finetune(load_recipe("finetune-classification", overrides), teacher, splits["train"],
             out, splits["eval"], overwrite=True, quiet=True)  # type: ignore[arg-type]  # fmt: skip
    row = last_window(out)
    check.record("finetune-bert-base", {"recipe": "finetune-classification", "model": "the bert-base run",
                                        "task": "Rotten Tomatoes sentiment", "batch_size": batch, "seq_len": 128},
                 measured_figures(row))  # fmt: skip


def distillation(check: Check, teacher: Path, corpus: Path) -> None:
    from bertkit.config.recipe import load_distill_recipe
    from bertkit.pipelines.distill.general import distill_general

    batch = 128 if not check.dry_run else 4
    overrides = [f"data.train={corpus}", *training_settings(check, batch), *check.overrides("bert")]
    out = check.work / "distill"
    reset_peak_memory()
    distill_general(load_distill_recipe("distilbert", None, overrides), str(teacher), out, "distilbert",
                    overwrite=True, quiet=True)  # fmt: skip
    row = last_window(out)
    check.record("distill-distilbert", {"recipe": "distilbert", "teacher": "the bert-base run", "batch_size": batch,
                                        "seq_len": 128}, measured_figures(row))  # fmt: skip


def measured_figures(row: dict[str, Any]) -> dict[str, dict[str, Any]]:
    figures = {"tokens_per_s": figure(row["tokens_per_s"], "tokens/s")}
    if row.get("mfu") is not None:
        figures["mfu"] = figure(round(100 * row["mfu"], 2), "%")
    if (memory := peak_memory_gib()) is not None:
        figures["peak_memory"] = figure(memory, "GiB")
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=str(ROOT / "results"), help="where records go (under gpu-check/)")
    parser.add_argument("--work", default=str(ROOT / "runs" / "gpu-check"), help="work folder (runs, corpora)")
    parser.add_argument("--dry-run", action="store_true", help="the same code on the CPU at a tiny shape")
    parser.add_argument("--minutes", type=float, default=7.0, help="start no part after this many minutes")
    parser.add_argument("--skip-tests", action="store_true", help="leave out the gpu-marked tests")
    args = parser.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    check = Check(args)
    if not args.skip_tests:
        gpu_tests(check)
    paths = prepare(check)
    teacher = pretraining(check, paths, SEQS[0])
    if teacher is not None and check.time_left("fine-tuning"):
        fine_tuning(check, teacher)
    if teacher is not None and check.time_left("distillation"):
        distillation(check, teacher, paths["corpus-128"])
    pretraining(check, paths, SEQS[1])
    print(f"[gpu-check] {len(check.written)} records in {check.output}"
          + (f"; left out: {', '.join(check.left_out)}" if check.left_out else ""), flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
