"""Evaluation suites (bertkit/config/suite.py) and the protocol's arithmetic (bertkit/pipelines/evaluate/aggregate.py),
checked against values computed by hand: the rate picked by the mean over seeds, the sample standard deviation and
median, a task's score as the mean of its score metrics, and the GLUE score as the mean of the task scores."""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path

import pytest
import yaml

from bertkit.config.suite import load_suite, parse_names, parse_rates, parse_seeds, suite_names, validate_suite
from bertkit.errors import BertkitError
from bertkit.pipelines.evaluate.aggregate import summarize_model, summarize_task
from bertkit.pipelines.evaluate.run import model_keys


def _suite(**task):
    return {
        "name": "mine",
        "tasks": [{"name": "a", "kind": "classification", "train": "t.csv", "eval": "d.csv", **task}],
    }


def test_shipped_suites_validate():
    assert {"glue", "local"} <= set(suite_names())
    for name in suite_names():
        suite, path = load_suite(name)
        assert suite.name == name and path.is_file()
    glue, _ = load_suite("glue")
    assert [t.name for t in glue.tasks] == ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"]
    assert glue.task("mnli").score_metrics == ["accuracy", "mm_accuracy"]
    assert glue.task("cola").rank_metric == "mcc" and glue.task("stsb").kind == "regression"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"texxt_field": "x"}, "task 'a': unknown key 'tasks.0.texxt_field'; did you mean 'tasks.0.text_field'?"),
        ({"kind": "sentiment"}, "bad value for 'tasks.0.kind'"),
        ({"metric": "bleu"}, "metric 'bleu' is not a classification metric; use one of accuracy, macro_f1"),
        ({"score": ["accuracy", "recall"]}, "score metric 'recall' is not reported for this task"),
        ({"lrs": [0.0]}, "each a finite number above 0"),
        ({"lrs": [float("nan")]}, "bad value for 'tasks.0.lrs.0': Input should be a finite number"),
        ({"lrs": [float("inf")]}, "bad value for 'tasks.0.lrs.0': Input should be a finite number"),
        ({"lrs": [1e-4, 1e-4]}, "give each learning rate once"),
        ({"seeds": [1, 1]}, "each once"),
        ({"seeds": [0, -1]}, "from 0 to 2^63-1"),
        ({"seeds": [2**63]}, "from 0 to 2^63-1"),
        ({"name": "a/b"}, "names a directory"),
        ({"kind": "token-classification", "extra_eval": {"x": "y"}}, "extra_eval applies to"),
    ],
)
def test_bad_task_is_one_clear_line(change, expected):
    with pytest.raises(BertkitError) as err:
        validate_suite(_suite(**change), "suite 'mine'")
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_regression_score_cannot_average_mse():
    with pytest.raises(BertkitError, match="lower-is-better"):
        validate_suite(_suite(kind="regression", metric="pearson", score=["pearson", "mse"]), "suite 'mine'")


def test_warm_start_must_come_from_an_earlier_task():
    first = {"name": "rte", "kind": "classification", "train": "t", "eval": "d", "warm_start": "mnli"}
    second = {"name": "mnli", "kind": "classification", "train": "t", "eval": "d"}
    with pytest.raises(BertkitError, match="'mnli', which runs after it"):
        validate_suite({"name": "s", "tasks": [first, second]}, "suite 's'")
    with pytest.raises(BertkitError, match="'mnli', which is not in the suite"):
        validate_suite({"name": "s", "tasks": [first]}, "suite 's'")
    with pytest.raises(BertkitError, match="two tasks are named 'mnli'"):
        validate_suite({"name": "s", "tasks": [second, second]}, "suite 's'")
    suite = validate_suite({"name": "s", "tasks": [second, first]}, "suite 's'")
    assert suite.task("rte").warm_start == "mnli"


def test_unknown_suite_and_bad_yaml(tmp_path):
    with pytest.raises(BertkitError, match="did you mean 'glue'"):
        load_suite("gleu")
    bad = tmp_path / "bad.yaml"
    bad.write_text("tasks: [", encoding="utf-8")
    with pytest.raises(BertkitError, match="not valid YAML"):
        load_suite(str(bad))


def test_grid_defaults_and_probe_settings():
    raw = _suite(lrs=[1e-5, 2e-5])
    raw.update(
        seeds=[0, 1],
        epochs=2,
        set=["train.batch_size=16"],
        probe={"solver": "optimizer", "lrs": [1e-3], "epochs": 9, "set": ["task.pool=mean"]},
    )
    suite = validate_suite(raw, "s")
    task = suite.tasks[0]
    assert suite.grid(task, probe=False) == ([1e-5, 2e-5], [0, 1], 2, ["train.batch_size=16"])
    assert suite.grid(task, probe=True) == (
        [1e-3],
        [0, 1],
        9,
        ["train.batch_size=16", "task.pool=mean", "task.head_solver=optimizer"],
    )
    # The default probe fits its head by L-BFGS: one cell a seed, no epochs, the finetune default solver
    raw["probe"] = {"set": ["task.pool=mean"]}
    fitted = validate_suite(raw, "s")
    assert fitted.grid(fitted.tasks[0], probe=True) == ([1e-5], [0, 1], None, ["train.batch_size=16", "task.pool=mean"])


def test_probe_rates_without_the_optimizer_and_lrs_with_an_lbfgs_probe_are_refused():
    for probe in ({"lrs": [1e-3]}, {"epochs": 3}):
        with pytest.raises(BertkitError, match="add `solver: optimizer` to `probe:`"):
            validate_suite({**_suite(), "probe": probe}, "s")
    raw = _suite()
    raw["tasks"][0]["probe"] = {"lrs": [1e-3]}
    with pytest.raises(BertkitError, match="task 'a'.*add `solver: optimizer` to its probe"):
        validate_suite(raw, "s")
    raw["tasks"][0]["probe"] = {"lrs": [1e-3], "solver": "optimizer"}  # the task's own solver takes its rates
    suite = validate_suite(raw, "s")
    assert suite.probe_solver(suite.tasks[0]) == "optimizer" and suite.grid(suite.tasks[0], True)[0] == [1e-3]
    with pytest.raises(BertkitError, match="fits its probe heads by L-BFGS, without a rate"):
        validate_suite(_suite(), "s").with_rates([1e-3], probe=True)


def test_rates_of_one_mode_replace_every_tasks_grid_in_that_mode_only():
    raw = _suite(lrs=[1e-5, 2e-5], probe={"lrs": [1e-2]})
    raw["tasks"].append({**raw["tasks"][0], "name": "b", "lrs": None, "probe": None})
    raw.update(lrs=[3e-5], probe={"solver": "optimizer", "lrs": [1e-3], "epochs": 9})
    suite = validate_suite(raw, "s")
    a, b = suite.tasks
    assert [suite.grid(t, False)[0] for t in (a, b)] == [[1e-5, 2e-5], [3e-5]]
    assert [suite.grid(t, True)[0] for t in (a, b)] == [[1e-2], [1e-3]]
    full = suite.with_rates([5e-5, 1e-4], probe=False)
    assert [full.grid(t, False)[0] for t in full.tasks] == [[5e-5, 1e-4]] * 2
    assert [full.grid(t, True) for t in full.tasks] == [suite.grid(t, True) for t in suite.tasks]
    probe = suite.with_rates([3e-3], probe=True)
    assert [probe.grid(t, True) for t in probe.tasks] == [([3e-3], [0, 1, 2], 9, ["task.head_solver=optimizer"])] * 2
    assert [probe.grid(t, False) for t in probe.tasks] == [suite.grid(t, False) for t in suite.tasks]
    assert suite.grid(a, False)[0] == [1e-5, 2e-5]  # the suite itself is left as it was


def test_full_rates_leave_a_probe_that_falls_back_on_them_as_it_was():
    # No probe rates anywhere: the probe runs at the full rates (the task's, else the suite's), and keeps them
    raw = _suite(lrs=[1e-4])
    raw["tasks"].append({**raw["tasks"][0], "name": "b", "lrs": None})
    suite = validate_suite({**raw, "lrs": [5e-5]}, "s")
    assert [suite.grid(t, True)[0] for t in suite.tasks] == [[1e-4], [5e-5]]
    full = suite.with_rates([3e-4], probe=False)
    assert [full.grid(t, False)[0] for t in full.tasks] == [[3e-4], [3e-4]]
    assert [full.grid(t, True) for t in full.tasks] == [suite.grid(t, True) for t in suite.tasks]


@pytest.mark.parametrize("text", ["", "abc", "1e-4,x", "0", "-1e-4", "nan", "inf", "1e-4,1e-4", ",", "1e-4,,3e-4",
                                  "1e-4,"])  # fmt: skip
def test_bad_rates_option_is_one_line(text):
    with pytest.raises(BertkitError) as err:
        parse_rates(text)
    message = str(err.value)
    assert message.startswith(f"--lrs '{text}': give finite learning rates above 0, each once") and "\n" not in message


def test_rates_option_parses_a_comma_list():
    assert parse_rates("5e-5, 1e-4,3e-4") == [5e-5, 1e-4, 3e-4]


def test_resume_checks_the_rates_and_reads_a_plan_from_before_the_option(tmp_path):
    from bertkit.fsutil import write_json_atomic
    from bertkit.pipelines.evaluate.run import PLAN, EvaluateOptions, _prepare_output

    plan = {"suite": {"name": "s"}, "models": {"m": "m0-m"}, "mode": "full", "data": "d"}
    write_json_atomic(tmp_path / PLAN, plan)  # as evaluations wrote it before the options: no "lrs" key...
    now = {**plan, "lrs": None, "seeds": None, "tasks": None}
    _prepare_output(tmp_path, now, EvaluateOptions(resume="last"))
    with pytest.raises(BertkitError, match=r"was started with the suite's rates \(no --lrs\)"):
        _prepare_output(tmp_path, {**now, "lrs": [1e-3]}, EvaluateOptions(resume="last"))
    write_json_atomic(tmp_path / PLAN, {**now, "lrs": [1e-3, 1e-2]})
    with pytest.raises(BertkitError, match="was started with --lrs 0.001,0.01; resume with the same"):
        _prepare_output(tmp_path, now, EvaluateOptions(resume="last"))
    _prepare_output(tmp_path, {**now, "lrs": [1e-3, 1e-2]}, EvaluateOptions(resume="last"))


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        ({}, {"seeds": [0, 1, 2, 3, 4]}, r"the suite's seeds \(no --seeds\)"),
        ({"seeds": [0, 1, 2, 3, 4]}, {"seeds": [0, 1, 2]}, "--seeds 0,1,2,3,4;"),
        ({}, {"tasks": ["sst2"]}, r"all the suite's tasks \(no --tasks\)"),
        ({"tasks": ["sst2", "rte"]}, {}, "--tasks sst2,rte;"),
    ],
)
def test_resume_checks_the_seeds_and_the_tasks(tmp_path, before, after, expected):
    from bertkit.fsutil import write_json_atomic
    from bertkit.pipelines.evaluate.run import PLAN, EvaluateOptions, _prepare_output

    plan = {"suite": {"name": "s"}, "models": {"m": "m0-m"}, "mode": "full", "data": "d", "lrs": None,
            "seeds": None, "tasks": None}  # fmt: skip
    write_json_atomic(tmp_path / PLAN, {**plan, **before})
    with pytest.raises(BertkitError, match=f"was started with {expected}"):
        _prepare_output(tmp_path, {**plan, **after}, EvaluateOptions(resume="last"))
    _prepare_output(tmp_path, {**plan, **before}, EvaluateOptions(resume="last"))


def test_resume_refuses_a_model_whose_weights_changed(tmp_path):
    from bertkit.fsutil import write_json_atomic
    from bertkit.pipelines.evaluate.run import PLAN, EvaluateOptions, _prepare_output

    plan = {"suite": {"name": "s"}, "models": {"runs/a": "m0-a", "runs/b": "m1-b"}, "mode": "full", "data": "d",
            "lrs": None, "seeds": None, "tasks": None}  # fmt: skip
    write_json_atomic(tmp_path / PLAN, plan)  # as written before fingerprints: resumes whatever the weights
    _prepare_output(tmp_path, {**plan, "weights": {"m0-a": "1", "m1-b": "2"}}, EvaluateOptions(resume="last"))
    write_json_atomic(tmp_path / PLAN, {**plan, "weights": {"m0-a": "1", "m1-b": "2"}})
    with pytest.raises(BertkitError, match=r"the weights of --model runs/b changed since .* \(trained again\?\)"):
        _prepare_output(tmp_path, {**plan, "weights": {"m0-a": "1", "m1-b": "3"}}, EvaluateOptions(resume="last"))
    _prepare_output(tmp_path, {**plan, "weights": {"m0-a": "1", "m1-b": "2"}}, EvaluateOptions(resume="last"))


def test_weights_fingerprint_follows_the_weights_only(tmp_path):
    from bertkit.pipelines.evaluate.run import weights_fingerprint

    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"x" * 64)
    (model / "config.json").write_text("{}")
    first = weights_fingerprint(model)
    (model / "config.json").write_text('{"a": 1}')  # not the weights
    (model / "model.safetensors").write_bytes(b"x" * 64)  # the same weights written again
    assert weights_fingerprint(model) == first
    (model / "model.safetensors").write_bytes(b"x" * 63 + b"y")  # other weights, the same size
    assert weights_fingerprint(model) != first
    # the hub cache links a snapshot's files to blobs: the fingerprint is the blob's
    blob, snapshot = tmp_path / "blob", tmp_path / "snapshot"
    blob.write_bytes(b"y" * 64)
    snapshot.mkdir()
    (snapshot / "model.safetensors").symlink_to(blob)
    linked = weights_fingerprint(snapshot)
    blob.write_bytes(b"y" * 65)
    assert weights_fingerprint(snapshot) != linked


def _three_tasks(**third) -> dict:
    tasks = [{"name": name, "kind": "classification", "train": "t", "eval": "d"} for name in ("mnli", "sst2", "rte")]
    tasks[2].update(third)
    return {"name": "s", "seeds": [0, 1, 2], "tasks": tasks}


def test_seeds_option_replaces_every_tasks_seeds():
    suite = validate_suite(_three_tasks(seeds=[7]), "s")
    assert [suite.grid(t, False)[1] for t in suite.tasks] == [[0, 1, 2], [0, 1, 2], [7]]
    five = suite.with_seeds([0, 1, 2, 3, 4])
    for probe in (False, True):
        assert [five.grid(t, probe)[1] for t in five.tasks] == [[0, 1, 2, 3, 4]] * 3
    assert [five.grid(t, True)[0] for t in five.tasks] == [suite.grid(t, True)[0] for t in suite.tasks]


@pytest.mark.parametrize("text", ["", " ", "a", "1.5", "-1", "1,1", "0,,1", "0,", "1e3", str(2**63)])
def test_bad_seeds_option_is_one_line(text):
    with pytest.raises(BertkitError) as err:
        parse_seeds(text)
    message = str(err.value)
    assert message.startswith(f"--seeds '{text}': give whole-number seeds from 0 to 2^63-1, each once")
    assert "\n" not in message


def test_seeds_option_parses_a_comma_list():
    assert parse_seeds("3, 1,4") == [3, 1, 4]


def test_tasks_option_cuts_the_suite_in_its_own_order():
    suite = validate_suite(_three_tasks(warm_start="mnli"), "s")
    cut = suite.with_tasks(parse_names("rte, mnli"))
    assert [t.name for t in cut.tasks] == ["mnli", "rte"] and cut.task("rte").warm_start == "mnli"
    assert [t.name for t in suite.with_tasks(["sst2"]).tasks] == ["sst2"]
    assert [t.name for t in suite.tasks] == ["mnli", "sst2", "rte"]  # the suite itself is left as it was


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["qqp"], "--tasks: suite 's' has no task 'qqp'; its tasks: mnli, sst2, rte"),
        ([""], "--tasks '': give task names of the suite, each once, separated by commas"),
        (["sst2", ""], "--tasks 'sst2,': give task names of the suite, each once"),
        (["rte"], "--tasks: task 'rte' warm-starts from 'mnli'; add mnli to --tasks"),
        (["sst2", "sst2"], "--tasks 'sst2,sst2': give task names of the suite, each once"),
    ],
)
def test_bad_tasks_option_is_one_line(names, expected):
    suite = validate_suite(_three_tasks(warm_start="mnli"), "s")
    with pytest.raises(BertkitError) as err:
        suite.with_tasks(names)
    assert str(err.value).startswith(expected) and "\n" not in str(err.value)


def _done(**metrics):
    return {"status": "done", "metrics": metrics}


def test_rate_picked_by_mean_over_seeds_then_spread_at_that_rate():
    suite = validate_suite(_suite(metric="accuracy", score=["accuracy", "macro_f1"]), "s")
    task = suite.tasks[0]
    results = {
        # lr 1e-5: the best single seed (0.95) but the worse mean (0.80)
        (1e-5, 0): _done(accuracy=0.95, macro_f1=0.9),
        (1e-5, 1): _done(accuracy=0.70, macro_f1=0.6),
        (1e-5, 2): _done(accuracy=0.75, macro_f1=0.7),
        # lr 2e-5: mean 0.85
        (2e-5, 0): _done(accuracy=0.84, macro_f1=0.80),
        (2e-5, 1): _done(accuracy=0.86, macro_f1=0.82),
        (2e-5, 2): _done(accuracy=0.85, macro_f1=0.78),
    }
    entry = summarize_task(task, [1e-5, 2e-5], [0, 1, 2], results)
    assert entry["lr"] == 2e-5 and entry["seeds"] == [0, 1, 2]
    assert entry["scores"] == [84.0, 86.0, 85.0]
    assert entry["mean"] == 85.0 and entry["median"] == 85.0 and entry["std"] == 1.0  # sample std of 84, 86, 85
    # the task's score per seed: the mean of accuracy and macro-F1 in points
    assert entry["score"]["per_seed"] == [82.0, 84.0, 81.5]
    assert entry["score"]["mean"] == round((82 + 84 + 81.5) / 3, 2)
    assert entry["metrics"] == {"accuracy": 85.0, "macro_f1": 80.0}
    assert entry["rates"] == {"1e-05": 80.0, "2e-05": 85.0}


def test_failed_cells_are_counted_and_left_out():
    suite = validate_suite(_suite(), "s")
    results = {
        (1e-5, 0): _done(accuracy=0.5, macro_f1=0.5),
        (1e-5, 1): {"status": "failed", "error": "loss was NaN"},
    }
    entry = summarize_task(suite.tasks[0], [1e-5], [0, 1], results)
    assert entry["failed_cells"] == 1 and entry["seeds"] == [0] and entry["scores"] == [50.0] and entry["std"] == 0.0
    nothing = summarize_task(suite.tasks[0], [1e-5], [0], {(1e-5, 0): {"status": "failed", "error": "x"}})
    assert nothing["lr"] is None and nothing["mean"] is None
    assert summarize_model(suite, {"a": nothing})["average"]["mean"] is None


def test_lower_is_better_rank_metric_picks_the_smaller_mean():
    suite = validate_suite(_suite(kind="regression", metric="mse", score=["pearson"]), "s")
    results = {(1e-5, 0): _done(mse=2.0, pearson=0.7), (2e-5, 0): _done(mse=1.0, pearson=0.6)}
    entry = summarize_task(suite.tasks[0], [1e-5, 2e-5], [0], results)
    assert entry["lr"] == 2e-5 and entry["scores"] == [1.0]  # mse stays on its own scale
    assert entry["score"]["mean"] == 60.0


def test_glue_score_is_the_mean_of_task_scores():
    """GLUE's rule: a task with several metrics scores their unweighted mean; the GLUE score is the mean over tasks
    (WNLI left out here, as BERT left it out). Values by hand: (50 + 90 + 86 + 84.5 + 75 + 80.5 + 87 + 60) / 8."""
    glue, _ = load_suite("glue")
    per_task = {
        "cola": {"mcc": 0.5, "accuracy": 0.8, "macro_f1": 0.7},
        "sst2": {"accuracy": 0.9, "macro_f1": 0.9},
        "mrpc": {"f1": 0.88, "accuracy": 0.84, "macro_f1": 0.8},
        "stsb": {"pearson": 0.85, "spearman": 0.84, "mse": 0.6},
        "qqp": {"f1": 0.7, "accuracy": 0.8},
        "mnli": {"accuracy": 0.8, "mm_accuracy": 0.81},
        "qnli": {"accuracy": 0.87},
        "rte": {"accuracy": 0.6},
    }
    tasks = {}
    for task in glue.tasks:
        results = {(1e-5, seed): _done(**per_task[task.name]) for seed in (0, 1, 2)}
        tasks[task.name] = summarize_task(task, [1e-5], [0, 1, 2], results)
    assert tasks["mrpc"]["score"]["mean"] == 86.0 and tasks["mnli"]["score"]["mean"] == 80.5
    assert tasks["stsb"]["metrics"]["mse"] == 0.6  # reported, on its own scale
    average = summarize_model(glue, tasks)["average"]
    assert average["mean"] == pytest.approx((50 + 90 + 86 + 84.5 + 75 + 80.5 + 87 + 60) / 8, abs=0.005)
    assert average["std"] == 0.0 and average["seeds"] == [0, 1, 2]


def test_average_spread_is_over_per_seed_suite_scores():
    raw = {"name": "s", "seeds": [0, 1], "tasks": [
        {"name": "a", "kind": "classification", "train": "t", "eval": "d"},
        {"name": "b", "kind": "classification", "train": "t", "eval": "d"},
    ]}  # fmt: skip
    suite = validate_suite(raw, "s")
    a = summarize_task(suite.tasks[0], [1e-5], [0, 1], {(1e-5, 0): _done(accuracy=0.6), (1e-5, 1): _done(accuracy=0.8)})
    b = summarize_task(suite.tasks[1], [1e-5], [0, 1], {(1e-5, 0): _done(accuracy=0.9), (1e-5, 1): _done(accuracy=0.9)})
    average = summarize_model(suite, {"a": a, "b": b})["average"]
    assert average["per_seed"] == [75.0, 85.0]
    assert average["mean"] == 80.0 and average["std"] == round(statistics.stdev([75, 85]), 2)


def test_model_keys_are_short_unique_directory_names():
    keys = model_keys(
        [
            "runs/pre/snapshots/step-100",
            "runs/pre/snapshots/step-200",
            "sentence-transformers/all-MiniLM-L6-v2",
            "./runs/ft/model",
        ]
    )
    assert list(keys.values()) == ["m0-pre-step-100", "m1-pre-step-200", "m2-all-MiniLM-L6-v2", "m3-ft"]
    with pytest.raises(BertkitError, match="given twice"):
        model_keys(["a", "a"])


def test_suite_yaml_round_trips_through_show(tmp_path):
    glue, _ = load_suite("glue")
    path = tmp_path / "copy.yaml"
    path.write_text(yaml.safe_dump(glue.model_dump(mode="json")), encoding="utf-8")
    again, _ = load_suite(str(path))
    assert again == glue


def test_a_task_ranked_by_mse_needs_a_score_of_higher_is_better_metrics():
    with pytest.raises(BertkitError, match="give the task a `score:` of higher-is-better metrics"):
        validate_suite(_suite(kind="regression", metric="mse"), "s")
    assert validate_suite(_suite(kind="regression", metric="mse", score=["spearman"]), "s").tasks[0].score_metrics == [
        "spearman"
    ]


@pytest.mark.parametrize("key", ["task.metric", "task.kind", "task.text_field"])
def test_the_tasks_own_keys_are_not_set_through_overrides(key):
    with pytest.raises(BertkitError, match=f"give '{key.removeprefix('task.')}' as the task's own key"):
        validate_suite(_suite(set=[f"{key}=x"]), "s")


def test_average_of_tasks_with_different_seeds_has_no_spread():
    raw = {"name": "s", "tasks": [
        {"name": "a", "kind": "classification", "train": "t", "eval": "d", "seeds": [0, 1]},
        {"name": "b", "kind": "classification", "train": "t", "eval": "d", "seeds": [5, 6]},
    ]}  # fmt: skip
    suite = validate_suite(raw, "s")
    a = summarize_task(suite.tasks[0], [1e-5], [0, 1], {(1e-5, 0): _done(accuracy=0.6), (1e-5, 1): _done(accuracy=0.8)})
    b = summarize_task(suite.tasks[1], [1e-5], [5, 6], {(1e-5, 5): _done(accuracy=0.9), (1e-5, 6): _done(accuracy=0.9)})
    average = summarize_model(suite, {"a": a, "b": b})["average"]
    assert average["mean"] == 80.0 and average["std"] is None and average["per_seed"] == []
    from bertkit.pipelines.evaluate.report import _cell

    assert _cell(average) == "80.00" and _cell(a["score"]) == "70.00 ± 14.14"


def test_counts_are_not_reported_as_metrics():
    suite = validate_suite(_suite(kind="token-classification", metric="f1"), "s")
    cell = _done(f1=0.5, precision=0.4, recall=0.6, accuracy=0.9, entities=237, predicted_entities=12, examples=400)
    entry = summarize_task(suite.tasks[0], [1e-5], [0], {(1e-5, 0): cell})
    assert entry["metrics"] == {"f1": 50.0, "precision": 40.0, "recall": 60.0, "accuracy": 90.0}


def test_warm_start_takes_the_best_seed_at_the_chosen_rate(tmp_path):
    from bertkit.pipelines.evaluate.cells import CellSpec
    from bertkit.pipelines.evaluate.run import _with_warm_start

    suite = validate_suite({"name": "s", "seeds": [0, 1, 2], "lrs": [1e-5, 2e-5], "tasks": [
        {"name": "src", "kind": "classification", "train": "t", "eval": "d"},
        {"name": "dst", "kind": "classification", "train": "t", "eval": "d", "warm_start": "src"},
    ]}, "s")  # fmt: skip
    results = {
        (1e-5, 0): _done(accuracy=0.99), (1e-5, 1): _done(accuracy=0.1), (1e-5, 2): _done(accuracy=0.1),
        (2e-5, 0): _done(accuracy=0.7), (2e-5, 1): _done(accuracy=0.8), (2e-5, 2): _done(accuracy=0.75),
    }  # fmt: skip
    entry = summarize_task(suite.tasks[0], [1e-5, 2e-5], [0, 1, 2], results)

    def spec(task: str, lr: float, seed: int) -> CellSpec:
        return CellSpec("m0", task, lr, seed, tmp_path / task / f"{lr}-{seed}", "r", (), Path("t"), Path("d"))

    sources = [spec("src", lr, seed) for lr in (1e-5, 2e-5) for seed in (0, 1, 2)]
    for source in sources:
        source.saved_model.mkdir(parents=True)
    started = _with_warm_start(spec("dst", 1e-5, 0), suite.tasks[1], {"m0": {"src": entry}}, {"src": sources})
    # the rate with the best mean (2e-5), not the best single cell (1e-5, seed 0); at it, seed 1
    assert started.model_dir == tmp_path / "src" / "2e-05-1" / "run" / "model"
    shutil.rmtree(started.model_dir)
    gone = _with_warm_start(spec("dst", 1e-5, 0), suite.tasks[1], {"m0": {"src": entry}}, {"src": sources})
    assert gone.model_dir is None and "--overwrite" in gone.warm_error
