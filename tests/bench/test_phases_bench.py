"""Phases on real text (`make bench`): a context extension against continuing at the short length, and decays from
two points of one stable phase.

Text: SQuAD v1.1 train's articles (Wikipedia, the data manifest's `squad` source), each article one document, every
20th article held out from training (none of them is in any test's data); an 8,000-piece WordPiece trained on the
rest; corpora at 64 and 512 tokens of both. Model: crammed-bert-tiny (ModernBERT's layer, 2 x 128, rotary).

1. Context extension. A stable phase at 64 tokens (constant rate after warm-up). Then, from its model and for the
   same extra compute (a FLOP budget, decayed linearly to zero over it): (a) the extension: 512 positions, the
   global rotary base raised 8x, as ModernBERT raised its own for its 8x, on a 512-token corpus of mixed lengths
   (`build-corpus --short-seq-prob 0.9`: nine sequences in ten aim at a random length from 2 to 512 tokens, so
   short inputs stay in the data); (a') the same on 512-token blocks alone; (b) the plain alternative: the same
   positions but 64-token blocks and the base as it was. What must hold: (a) scores a higher held-out masked
   accuracy on 512-token blocks than (b), and no worse than (b) minus 0.01 on 64-token blocks. Measured: with
   a share of 0.5, (a) fell 1.2 points short at 64 tokens; with 0.9 it holds.
2. Decay from two points. A warmup-stable-decay stable phase at 64 tokens keeping a checkpoint every 100 steps;
   `--decay-from` its step-200 and its step-400 checkpoints, each decayed over 100 steps. What must hold: the later
   one scores higher held-out masked accuracy at 64 tokens.

Held-out masked accuracy: bertkit's own evaluation (fixed 15% masks, 80/10/10) over the held-out articles' blocks.
Run alone: `.venv/bin/python -m pytest -m bench tests/bench/test_phases_bench.py -s`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from cli_helpers import run_json
from records import figure, write_record

HELD_OUT_EVERY = 20
STABLE_STEPS = 600
EXTRA_FLOPS = "1.5e12flop"  # about half the stable phase's compute
# The extension's global rotary base (the stable phase's is 10,000); BERTKIT_EXTENSION_THETA overrides it.
EXTENSION_THETA = float(os.environ.get("BERTKIT_EXTENSION_THETA", "80000"))
# The share of the extension corpus's sequences that aim at a shorter random length (--short-seq-prob).
SHORT_SHARE = float(os.environ.get("BERTKIT_EXTENSION_SHORT", "0.9"))
COMMON = ["--set", "engine.precision=fp32", "--set", "train.batch_size=32", "--set", "train.grad_accum=1",
          "--set", "train.batch_ramp=0", "--set", "train.log_every=50", "--set", "train.eval_batches=4",
          "--set", "train.eval_every_share=0", "--set", "data.masking.prob=0.4"]  # fmt: skip


@pytest.fixture(scope="module")
def text(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from bertkit.data.sources import read_member

    work = tmp_path_factory.mktemp("phases-bench")
    articles = []
    for article in json.loads(read_member("squad", "train"))["data"]:
        paragraphs = [" ".join(p["context"].split()) for p in article["paragraphs"]]
        articles.append("\n".join(dict.fromkeys(paragraphs)))  # one document: its paragraphs, one a line
    train = [a for i, a in enumerate(articles) if i % HELD_OUT_EVERY]
    held = [a for i, a in enumerate(articles) if i % HELD_OUT_EVERY == 0]
    paths = {"train": work / "train.txt", "held": work / "held.txt", "tok": work / "tok"}
    paths["train"].write_text("\n\n".join(train) + "\n", "utf-8")
    paths["held"].write_text("\n\n".join(held) + "\n", "utf-8")
    run_json("tokenize", "train", "--kind", "wordpiece", "--vocab-size", "8000", "--input", str(paths["train"]),
             "--output", str(paths["tok"]))  # fmt: skip
    for name in ("train", "held"):
        for length in (64, 512):
            paths[f"{name}-{length}"] = work / f"{name}-{length}"
            run_json("build-corpus", "-i", str(paths[name]), "-t", str(paths["tok"]), "-o",
                     str(paths[f"{name}-{length}"]), "--max-seq-len", str(length))  # fmt: skip
    paths["train-mixed"] = work / "train-mixed"
    run_json("build-corpus", "-i", str(paths["train"]), "-t", str(paths["tok"]), "-o", str(paths["train-mixed"]),
             "--max-seq-len", "512", "--short-seq-prob", str(SHORT_SHARE))  # fmt: skip
    return paths


def held_out_accuracy(model_dir: Path, corpus_dir: Path, sequences: int = 256) -> float:
    """bertkit's held-out masked accuracy of the model in `model_dir` on the first `sequences` blocks of a corpus."""
    import numpy as np
    import torch

    from bertkit.config.schema import MaskingConfig, ObjectiveConfig
    from bertkit.corpus.shards import Corpus
    from bertkit.engine.checkpoint import load_state
    from bertkit.modelio.modeldir import load_model_dir
    from bertkit.models.pretraining import build_pretraining_model
    from bertkit.objectives import build_objective
    from bertkit.pipelines.pretrain import _evaluator, mlm_masking_spec

    _, _, cfg, weights, tokenizer = load_model_dir(model_dir)
    model = build_pretraining_model(cfg, ObjectiveConfig())
    load_state(model, weights, str(model_dir))
    corpus = Corpus(corpus_dir)
    spec = mlm_masking_spec(MaskingConfig(prob=0.15), tokenizer)
    evaluate = _evaluator(corpus, np.arange(len(corpus)), spec, tokenizer.pad_id, 32, sequences,
                          torch.device("cpu"), build_objective(ObjectiveConfig()))  # fmt: skip
    with torch.no_grad():
        return round(float(evaluate(model.eval())["mlm_acc"]), 4)


def pretrain(output: Path, corpus: Path, *args: str) -> dict:
    return run_json("pretrain", "-r", "crammed-bert-tiny", "-c", str(corpus), "-o", str(output), *COMMON, *args)


@pytest.mark.bench
def test_context_extension_and_decays_from_two_points(text: dict[str, Path], tmp_path: Path, capsys) -> None:
    started = time.perf_counter()
    stable = tmp_path / "stable"
    pretrain(stable, text["train-64"], "--set", f"train.steps={STABLE_STEPS}", "--set", "train.budget=null",
             "--set", "schedule.decay=wsd", "--set", "schedule.decay_fraction=0.2", "--set", "schedule.warmup_steps=30",
             "--set", "schedule.warmup_fraction=0", "--set", "train.checkpoint_every=100",
             "--set", "train.keep_every=100", "--set", f"data.eval={text['held-64']}")  # fmt: skip
    _export_step(stable, 400)
    extra = ["--init-from", str(stable / "checkpoints" / "step-400-model"), "--set", f"train.budget={EXTRA_FLOPS}",
             "--set", "schedule.warmup_fraction=0", "--set", "schedule.warmup_steps=0",
             "--set", "schedule.decay=linear"]  # fmt: skip
    extended, long_only, plain = tmp_path / "extended", tmp_path / "extended-512-only", tmp_path / "plain"
    for run, corpus in ((extended, text["train-mixed"]), (long_only, text["train-512"])):
        pretrain(run, corpus, *extra, "--set", "model.max_position_embeddings=512",
                 "--set", f"model.global_rope_theta={EXTENSION_THETA:g}", "--set", "train.batch_size=4")  # fmt: skip
    pretrain(plain, text["train-64"], *extra, "--set", "model.max_position_embeddings=512")
    decays = {}
    for step in (200, 400):
        decays[step] = tmp_path / f"decay-{step}"
        pretrain(decays[step], text["train-64"], "--decay-from", str(stable / "checkpoints" / f"step-{step}"),
                 "--set", "train.steps=100", "--set", "train.budget=null", "--set", "schedule.decay=wsd",
                 "--set", "schedule.decay_fraction=0.2")  # fmt: skip
    scores = {name: {length: held_out_accuracy(run / "model", text[f"held-{length}"]) for length in (64, 512)}
              for name, run in (("extended", extended), ("extended-512-only", long_only),
                                ("plain", plain))}  # fmt: skip
    # where both started (its 128 positions read 64-token blocks only)
    scores["stable-400"] = {64: held_out_accuracy(stable / "checkpoints" / "step-400-model", text["held-64"])}
    decayed = {step: held_out_accuracy(run / "model", text["held-64"]) for step, run in decays.items()}
    with capsys.disabled():
        print(f"\n[bench] phases on SQuAD articles, crammed-bert-tiny; {(time.perf_counter() - started) / 60:.1f} min "
              f"on {os.cpu_count()} cores")  # fmt: skip
        for name, row in scores.items():
            at_512 = f", at 512 {row[512]:.4f}" if 512 in row else ""
            print(f"[bench]   {name:17} held-out masked accuracy at 64 tokens {row[64]:.4f}{at_512}")
        for step, value in decayed.items():
            print(f"[bench]   decayed from step {step}: {value:.4f} at 64 tokens")
    figures = {f"{name}_acc_{length}": figure(value, "masked accuracy", "bertkit" if name == "extended" else name)
               for name, row in scores.items() for length, value in row.items()}  # fmt: skip
    figures.update({f"decay_from_{step}_acc_64": figure(value, "masked accuracy", "bertkit")
                    for step, value in decayed.items()})  # fmt: skip
    write_record("phases", "pytest -m bench tests/bench/test_phases_bench.py",
                 {"model": "crammed-bert-tiny", "stable_steps": STABLE_STEPS, "extra_compute": EXTRA_FLOPS,
                  "extension": {"length": 512, "global_rope_theta": EXTENSION_THETA, "short_seq_prob": SHORT_SHARE},
                  "decay_steps": 100,
                  "text": "SQuAD v1.1 train articles, every 20th held out"}, figures, "fp32")  # fmt: skip
    assert scores["extended"][512] > scores["plain"][512], scores
    assert scores["extended"][64] >= scores["plain"][64] - 0.01, scores
    assert decayed[400] > decayed[200], decayed


def _export_step(run: Path, step: int) -> None:
    """The stable run's step-N checkpoint as a model directory beside it (what --init-from and the scoring read)."""
    import yaml

    from bertkit.config.recipe import PretrainRecipe
    from bertkit.corpus.build import TOKENIZER_SUBDIR
    from bertkit.modelio.modeldir import save_model_dir
    from bertkit.modelio.weights import read_weights
    from bertkit.pipelines.rundir import RECIPE_FILE
    from bertkit.tokenizers.base import load_tokenizer

    recipe = PretrainRecipe.model_validate(yaml.safe_load((run / RECIPE_FILE).read_text("utf-8")))
    weights = read_weights(run / "checkpoints" / f"step-{step}" / "model.safetensors")
    tokenizer = load_tokenizer(Path(str(recipe.data.train)) / TOKENIZER_SUBDIR)
    save_model_dir(run / "checkpoints" / f"step-{step}-model", weights, recipe.model, "pretraining", tokenizer,
                   {"recipe": recipe.name, "steps": step})  # fmt: skip
