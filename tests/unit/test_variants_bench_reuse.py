"""The variants bench (tests/bench/variants.py) reuses a finished pretraining run only for the same budget and the
same settings, and takes the model from the run's own folder: a work folder moved since (to another disk, another
machine) still serves its runs, though their summaries name the old place."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest


def finished_run(work: Path, name: str, settings: str, old_place: Path) -> None:
    """What a finished run leaves that the bench reads: its summary (written where the run first was) and the
    budget and settings it ran with."""
    run = work / "runs" / name
    (run / "model").mkdir(parents=True)
    summary = {"model_dir": str(old_place / "runs" / name / "model"), "steps": 1590, "tokens": 9_523_127,
               "flops": 2e14, "eval": {"mlm_acc": 0.1347, "nsp_acc": 0.6035}}  # fmt: skip
    (run / "summary.json").write_text(json.dumps(summary), "utf-8")
    (run / "bench-budget.txt").write_text(settings, "utf-8")


def test_a_moved_work_folder_serves_its_finished_runs(variants, tmp_path: Path, monkeypatch) -> None:
    work = tmp_path / "moved"
    finished_run(work, "bert", variants.reuse_key("bert", "2e14flop", {}), old_place=tmp_path / "gone")
    monkeypatch.setattr(variants, "bertkit", lambda *args: pytest.fail(f"retrained: bertkit {args}"))
    row = variants.pretrain({"held-bert": work / "held-bert"}, work, "bert", "2e14flop")
    assert row["model_dir"] == str(work / "runs" / "bert" / "model")
    assert Path(row["model_dir"]).is_dir()
    assert (row["steps"], row["eval_mlm_acc"], row["eval_nsp_acc"]) == (1590, 0.1347, 0.6035)


def test_another_budget_or_setting_trains_again(variants, tmp_path: Path, monkeypatch) -> None:
    work = tmp_path / "work"
    recipe = f"recipe: electra-small {variants.recipe_identity('electra-small')}"
    bench = "\n".join(f"bench {key}={variants.spelled(value)}"
                      for key, value in sorted(variants.shared_settings("electra").items()))  # fmt: skip
    assert "bench model.hidden_size=" in bench and "bench train.batch_size=64.0" in bench
    finished_run(work, "electra", f"2e14flop\noptim.lr=0.0005\n{bench}\n{recipe}\ncorpus: --format single-segment",
                 work)  # fmt: skip
    calls: list[tuple] = []

    def pretrain_run(*args):
        calls.append(args)
        return {"model_dir": str(work / "runs" / "electra" / "model"), "steps": 3000, "tokens": 1, "flops": 4e14}

    monkeypatch.setattr(variants, "bertkit", pretrain_run)
    paths = {"corpus-electra": work / "corpus-electra"}
    variants.pretrain(paths, work, "electra", "2e14flop")  # ELECTRA's own rate, as the run had: reused
    variants.pretrain(paths, work, "electra", "2e14flop", own={"optim.lr": "5e-4"})  # the same rate, spelled otherwise
    assert calls == []
    variants.pretrain(paths, work, "electra", "4e14flop")
    row = variants.pretrain(paths, work, "electra", "4e14flop", own={"optim.lr": "1e-3"})
    assert len(calls) == 2 and "optim.lr=1e-3" in calls[1]
    assert row["model_dir"] == str(work / "runs" / "electra" / "model")
    assert row["settings"] == {"optim.lr": "1e-3"} and row["own_settings"] == {"optim.lr": "1e-3"}
    assert (work / "runs" / "electra" / "bench-budget.txt").read_text("utf-8") == (
        f"4e14flop\noptim.lr=0.001\n{bench}\n{recipe}\ncorpus: --format single-segment"
    )


@pytest.mark.parametrize("edit", ["batch", "shape", "optimiser"])
def test_a_run_made_before_the_bench_changed_trains_again(variants, tmp_path: Path, monkeypatch, edit: str) -> None:
    """The bench's own settings (its shape, batch, shared optimizer) are part of the key: a run finished before one
    of them was edited is not reused."""
    work = tmp_path / "work"
    finished_run(work, "roberta", variants.reuse_key("roberta", "2e14flop", {}), old_place=work)
    calls: list[tuple] = []
    monkeypatch.setattr(variants, "bertkit", lambda *args: calls.append(args) or {"model_dir": "model", "steps": 1,
                                                                                   "tokens": 1, "flops": 2e14})
    variants.pretrain({"corpus-roberta": work / "c", "held-roberta": work / "h"}, work, "roberta", "2e14flop")
    assert calls == []
    if edit == "batch":
        monkeypatch.setattr(variants, "BATCH", {**variants.BATCH, "train.batch_size": 32})
    elif edit == "shape":
        monkeypatch.setattr(variants, "SHAPE", {**variants.SHAPE, "model.num_layers": 6})
    else:
        monkeypatch.setattr(variants, "SHARED_OPTIMISER", {**variants.SHARED_OPTIMISER, "optim.lr": 5e-4})
    variants.pretrain({"corpus-roberta": work / "c", "held-roberta": work / "h"}, work, "roberta", "2e14flop")
    assert len(calls) == 1 and "--overwrite" in calls[0]


def test_the_key_names_the_seed_and_the_generator_width(variants) -> None:
    own = variants.VARIANT_SETTINGS["electra"]
    keys = {variants.reuse_key("electra", "4e14flop", own), variants.reuse_key("electra", "4e14flop", own, seed=1),
            variants.reuse_key("electra", "4e14flop", own, generator=0.5),
            variants.reuse_key("electra", "4e14flop", own, generator=1.0)}  # fmt: skip
    assert len(keys) == 4
    assert "bench model.generator.hidden_fraction=0.5" in variants.reuse_key("electra", "4e14flop", own, generator=0.5)


@pytest.mark.parametrize(
    "key",
    [
        "4e14flop",  # one copy of each static mask: the key without corpus options
        "4e14flop\ncorpus: --format segment-pair --masking static --dupe-factor 10 --max-predictions 20",  # one packing
    ],
)
def test_a_run_on_other_corpus_options_trains_again(variants, tmp_path: Path, monkeypatch, key: str) -> None:
    """BERT's run from a work folder whose corpus had one copy of each static mask, or ten copies sharing one
    packing (their segment pairs and NSP labels), is not BERT's run with ten copies packed apart."""
    work = tmp_path / "work"
    finished_run(work, "bert", key, old_place=work)
    calls: list[tuple] = []
    summary = {"model_dir": str(work / "runs" / "bert" / "model"), "steps": 3181, "tokens": 1, "flops": 4e14}
    monkeypatch.setattr(variants, "bertkit", lambda *args: calls.append(args) or summary)
    variants.pretrain({"held-bert": work / "held-bert", "corpus-bert": work / "corpus-bert"}, work, "bert", "4e14flop")
    assert len(calls) == 1 and calls[0][0] == "pretrain"
    assert "--dupe-factor 10 --max-predictions 20 (copies packed apart)" in (
        work / "runs" / "bert" / "bench-budget.txt"
    ).read_text("utf-8")


@pytest.mark.parametrize("name", ["albert", "albert-nsp"])
def test_albert_trains_on_its_own_pipelines_copies(variants, tmp_path: Path, monkeypatch, name: str) -> None:
    """ALBERT's create_pretraining_data (google-research/albert) makes 40 copies of the text, each packed afresh with
    its own pairs and static n-gram masks, at most 20 predictions: a run on one packing, where SOP learnt the
    repeated pairs by heart (docs/benchmarks.md), trains again on that corpus."""
    work = tmp_path / "work"
    options = "--format sop" if name == "albert" else "--format segment-pair"
    finished_run(work, name, f"4e14flop\ncorpus: {options} --mask-strategy ngram", old_place=work)
    calls: list[tuple] = []
    summary = {"model_dir": str(work / "runs" / name / "model"), "steps": 3072, "tokens": 1, "flops": 4e14}
    monkeypatch.setattr(variants, "bertkit", lambda *args: calls.append(args) or summary)
    paths = {f"held-{name}": work / f"held-{name}", f"corpus-{name}": work / f"corpus-{name}"}
    variants.pretrain(paths, work, name, "4e14flop")
    assert len(calls) == 1 and calls[0][0] == "pretrain"
    key = (work / "runs" / name / "bench-budget.txt").read_text("utf-8")
    albert_copies = "--mask-strategy ngram --masking static --dupe-factor 40 --max-predictions 20 (copies packed apart)"
    assert key.endswith(f"corpus: {options} {albert_copies}")


def test_corpora_are_built_again_for_other_options(variants, tmp_path: Path, monkeypatch) -> None:
    """BERT trains on BERT's static masks (10 copies, at most 20 predictions, SPEC), its held-out documents are masked
    by token without them; a corpus built with other options is built again, one built with these is reused."""
    work = tmp_path / "work"
    for name in ("train.txt", "held.txt", "held.jsonl"):
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text("text\n", "utf-8")
    for folder in ("tok", "corpus-bert", "held-bert", "corpus-roberta", "held-roberta"):
        (work / folder).mkdir()
    # BERT's ten copies as the bench built them before build-corpus packed each copy apart: built again.
    (work / "corpus-bert.options.txt").write_text(
        "--format segment-pair --masking static --dupe-factor 10 --max-predictions 20", "utf-8"
    )
    (work / "held-bert.options.txt").write_text("--format segment-pair", "utf-8")
    for kind in ("corpus", "held"):
        (work / f"{kind}-roberta.options.txt").write_text("--format full-sentences", "utf-8")
    built: list[tuple] = []
    monkeypatch.setattr(variants, "bertkit", lambda *args: built.append(args))
    variants.prepare(work, None, ["bert"])
    assert [str(args[6]) for args in built] == [str(work / "corpus-bert")]
    assert list(built[0][-8:]) == ["--format", "segment-pair", "--masking", "static", "--dupe-factor", "10",
                                   "--max-predictions", "20"]  # fmt: skip
    assert "--overwrite" in built[0]
    assert variants.held_out_options("bert") == ["--format", "segment-pair"]
    assert variants.held_out_options("albert") == ["--format", "sop"]
    assert variants.held_out_options("spanbert") == variants.VARIANTS["spanbert"][1]
    built.clear()
    variants.prepare(work, None, ["bert"])
    assert built == []


def test_a_seed_is_a_run_of_its_own(variants, tmp_path: Path, monkeypatch) -> None:
    """--pretrain-seeds: seed 0 is the variant's own run (reused as before), another seed trains in its own folder
    with train.seed set, and the row says which variant and seed it is."""
    work = tmp_path / "work"
    finished_run(work, "roberta", variants.reuse_key("roberta", "2e14flop", {}), old_place=work)
    calls: list[tuple] = []

    def pretrain_run(*args):
        calls.append(args)
        (work / "runs" / "roberta-seed1").mkdir(parents=True)  # what `bertkit pretrain` makes
        return {"model_dir": str(work / "runs" / "roberta-seed1" / "model"), "steps": 1335, "tokens": 1, "flops": 2e14}

    monkeypatch.setattr(variants, "bertkit", pretrain_run)
    paths = {"corpus-roberta": work / "corpus-roberta", "held-roberta": work / "held-roberta"}
    first = variants.pretrain(paths, work, "roberta", "2e14flop", seed=0)
    assert calls == [] and (first["name"], first["run_of"], first["seed"]) == ("roberta", "roberta", 0)
    second = variants.pretrain(paths, work, "roberta", "2e14flop", seed=1)
    assert len(calls) == 1 and "train.seed=1" in calls[0] and str(work / "runs" / "roberta-seed1") in map(str, calls[0])
    assert (second["name"], second["run_of"], second["seed"]) == ("roberta-seed1", "roberta", 1)
    assert second["model_dir"] == str(work / "runs" / "roberta-seed1" / "model")


def test_averages_over_pretraining_runs(variants) -> None:
    """Each variant's runs and the untrained encoder's initial weights, one a seed: the mean and sample standard
    deviation of their suite averages, and the largest seed spread of one run; one run alone is not pooled."""
    runs = [{"name": "bert", "run_of": "bert"}, {"name": "bert-seed1", "run_of": "bert"},
            {"name": "electra-gen0.5", "run_of": "electra-gen0.5"},
            {"name": "electra-gen0.5-seed1", "run_of": "electra-gen0.5"}, {"name": "xlnet", "run_of": "xlnet"}]
    average = {"bert": {"mean": 31.0, "std": 0.1}, "bert-seed1": {"mean": 33.0, "std": 0.4},
               "electra-gen0.5": {"mean": 29.0, "std": 0.7}, "electra-gen0.5-seed1": {"mean": 30.0, "std": 0.2},
               "xlnet": {"mean": 37.0, "std": 0.5},
               "untrained": {"mean": 29.1, "std": 0.3}, "untrained-seed1": {"mean": 28.9, "std": 0.2}}  # fmt: skip
    pooled = variants.over_pretraining(runs, average, [0, 1])
    assert pooled["bert"] == {"mean": 32.0, "std": 1.41, "runs": 2, "seed_std": 0.4}
    assert pooled["electra-gen0.5"] == {"mean": 29.5, "std": 0.71, "runs": 2, "seed_std": 0.7}
    assert pooled["untrained"] == {"mean": 29.0, "std": 0.14, "runs": 2, "seed_std": 0.3}
    assert "xlnet" not in pooled  # xlnet-seed1 did not finish
    report = {"budget": "2e14flop", "runs": [dict(r, steps=1, tokens=1) for r in runs],
              "downstream": {"probe": {"average": average, "pretraining": pooled}}}  # fmt: skip
    table = variants.markdown(report)
    assert "| bert | 2 | 32.00 ± 1.41 (0.40) |" in table
    assert "| untrained-seed1 |" in table and "| untrained | 2 | 29.00 ± 0.14 (0.30) |" in table


def test_full_fine_tuning_alone(variants) -> None:
    """A report scored in full fine-tuning alone (`--downstream full`): its tables have the full average alone, the
    untrained encoder's rows and the pooled runs included."""
    runs = [{"name": "roberta", "run_of": "roberta"}, {"name": "roberta-seed1", "run_of": "roberta"}]
    average = {"roberta": {"mean": 34.54, "std": 0.53}, "roberta-seed1": {"mean": 33.9, "std": 0.8},
               "untrained": {"mean": 28.21, "std": 0.74}, "untrained-seed1": {"mean": 28.0, "std": 0.5}}  # fmt: skip
    pooled = variants.over_pretraining(runs, average, [0, 1])
    report = {"budget": "4e14flop", "lrs": [5e-5, 1e-4, 3e-4], "runs": [dict(r, steps=1, tokens=1) for r in runs],
              "downstream": {"full": {"average": average, "pretraining": pooled}}}  # fmt: skip
    lines = variants.markdown(report).splitlines()
    assert "probe" not in "\n".join(lines)
    header = next(line for line in lines if line.startswith("| variant | steps"))
    assert header.endswith("| full average |")
    assert next(line for line in lines if line.startswith("| untrained-seed1 |")).endswith("| 28.00 ± 0.50 |")
    assert "| variant | runs | full average |" in lines and "| roberta | 2 | 34.22 ± 0.45 (0.80) |" in lines


@pytest.mark.parametrize(
    ("downstream", "qa", "modes"),
    [
        ("full", [], ["full"]),
        ("both", [], ["probe", "full"]),
        ("probe", [], ["probe"]),
        ("none", ["--qa", "60,30"], []),
    ],
)
def test_the_bench_scores_the_modes_asked_for_beside_the_floors(
    variants, tmp_path: Path, monkeypatch, downstream: str, qa: list[str], modes: list[str]
) -> None:
    # main() with its pretraining and scoring stood in for: each mode asked for is scored, in order, with the untrained
    # encoder at each pretraining seed among the models, and report.json holds those modes alone (QA-only: none).
    import sys

    work = tmp_path / "work"
    scored: list[tuple[str, list[str]]] = []
    floors: list[str] = []
    qa_models: list[list[str]] = []

    def pretrain(paths, work, name, budget, width, threads, own, seed):
        return {"name": variants.seeded(name, seed), "run_of": name, "model_dir": str(work / "runs" / name)}

    def untrained(corpus, output, recipe, extra):
        floors.append(output.name)
        return output

    def evaluate(work, models, mode, data, smoke, jobs, lrs):
        scored.append((mode, sorted(models)))
        return {name: {"stsb": {"mean": 10.0, "std": 0.0, "seeds": [0], "per_seed": [10.0], "lr": 5e-5}}
                for name in models}  # fmt: skip

    def qa_scores(work, models, data, smoke, jobs, lrs):
        qa_models.append(sorted(models))
        return {}

    def prepare(work, text, names):
        work.mkdir(parents=True)
        return {"corpus-roberta": work / "corpus-roberta"}

    monkeypatch.setattr(variants, "prepare", prepare)
    monkeypatch.setattr(variants, "pretrain", pretrain)
    monkeypatch.setattr(variants, "plateau", lambda work, paths, runs: None)
    monkeypatch.setattr(variants, "detection", lambda work, paths, runs: None)
    monkeypatch.setattr(variants, "untrained", untrained)
    monkeypatch.setattr(variants, "suite_data", lambda work, smoke, qa=None: work / "suite")
    monkeypatch.setattr(variants, "evaluate", evaluate)
    monkeypatch.setattr(variants, "qa_scores", qa_scores)
    argv = ["variants.py", "--work", str(work), "--variants", "roberta", "--budget", "2e12flop", "--pretrain-seeds",
            "0,1", "--downstream", downstream, *qa]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    variants.main()
    everyone = ["roberta", "roberta-seed1", "untrained", "untrained-seed1"]
    assert scored == [(mode, everyone) for mode in modes]
    assert floors == ["untrained", "untrained-seed1"]
    assert qa_models == ([everyone] if qa else [])
    report = json.loads((work / "report.json").read_text("utf-8"))
    assert list(report["downstream"]) == modes


def test_qa_f1_over_pretraining_runs(variants) -> None:
    """With --qa and several pretraining seeds, each variant's QA F1 is pooled over its runs as the suite average
    is: the mean and sample standard deviation of the runs' F1, the largest seed spread of one run beside them."""
    runs = [{"name": "spanbert", "run_of": "spanbert"}, {"name": "spanbert-seed1", "run_of": "spanbert"}]
    f1 = {"spanbert": {"mean": 8.48, "std": 0.75}, "spanbert-seed1": {"mean": 8.62, "std": 0.63},
          "untrained": {"mean": 5.36, "std": 0.41}, "untrained-seed1": {"mean": 5.40, "std": 0.56}}  # fmt: skip
    pooled = variants.over_pretraining(runs, f1, [0, 1])
    assert pooled["spanbert"] == {"mean": 8.55, "std": 0.1, "runs": 2, "seed_std": 0.75}
    assert pooled["untrained"] == {"mean": 5.38, "std": 0.03, "runs": 2, "seed_std": 0.56}
    scores = {name: {"f1": {**row, "per_seed": []}, "exact_match": 1.0, "score": row} for name, row in f1.items()}
    report = {"budget": "4e14flop", "runs": [dict(r, steps=1, tokens=1) for r in runs], "downstream": {},
              "qa": {"train": 1000, "dev": 500, "scores": scores, "pretraining": pooled}}  # fmt: skip
    table = variants.markdown(report)
    assert "QA F1 over pretraining runs" in table
    assert "| spanbert | 2 | 8.55 ± 0.10 (0.75) |" in table and "| untrained | 2 | 5.38 ± 0.03 (0.56) |" in table


def test_plateau_scores_only_models_with_an_mlm_head(variants, tmp_path: Path, monkeypatch) -> None:
    """`--set albert:objective.mlm=0` trains ALBERT on SOP alone: no MLM head to export, so nothing to score on the
    token masks, where the export would fail."""
    monkeypatch.setattr(variants, "evaluation_set", lambda *args: pytest.fail("built the token masks"))
    monkeypatch.setattr(variants, "bertkit", lambda *args: pytest.fail(f"bertkit {args}"))
    rows = [{"name": "albert", "variant": "albert", "eval_mlm_acc": None, "model_dir": str(tmp_path / "model")},
            {"name": "electra", "variant": "electra", "eval_mlm_acc": None, "model_dir": str(tmp_path / "model")}]
    variants.plateau(tmp_path, {}, rows)
    assert all("left_plateau" not in row for row in rows)


def test_token_mask_scores_are_kept_with_the_run(variants, tmp_path: Path, monkeypatch) -> None:
    """A model is exported and scored on the token masks once; a reused run reads its scores back."""
    calls: list[str] = []
    monkeypatch.setattr(variants, "evaluation_set", lambda *args: calls.append("masks") or {"masks": 1})
    monkeypatch.setattr(variants, "bertkit", lambda *args: calls.append(args[0]))
    scores = {"eval_mlm_acc": 0.1258, "acc_frequent": 0.1874, "acc_rest": 0.0688}
    monkeypatch.setattr(variants, "score_masked", lambda hf, masks: calls.append("score") or dict(scores))
    paths = {"held-documents": tmp_path / "held.jsonl", "tok": tmp_path / "tok", "train": tmp_path / "train.txt"}

    def rows() -> list[dict]:
        (tmp_path / "runs" / "bert" / "model").mkdir(parents=True, exist_ok=True)
        return [{"name": "bert", "variant": "bert", "eval_mlm_acc": 0.1347,
                 "model_dir": str(tmp_path / "runs" / "bert" / "model")}]  # fmt: skip

    first, again = rows(), rows()
    variants.plateau(tmp_path, paths, first)
    assert calls == ["masks", "export", "score"]
    variants.plateau(tmp_path, paths, again)
    assert calls == ["masks", "export", "score"]  # nothing built, exported or scored the second time
    assert first == again and again[0]["token_masks_acc_rest"] == 0.0688 and again[0]["left_plateau"] is True


def test_the_full_rate_grid_reaches_every_task_and_leaves_the_probe_alone(
    variants, tmp_path: Path, monkeypatch
) -> None:
    # The bench hands its grid to `bertkit evaluate --lrs` in full fine-tuning (the QA-only evaluation too), never
    # with --probe; bertkit's own parser and suite read the argument back to the grid on every task (NER and QA lose
    # their own 1e-4), and the probe keeps the suite's 2e-3.
    import sys

    from bertkit.config.suite import load_suite, parse_names, parse_rates

    calls: list[list[str]] = []

    def evaluate_command(*args):
        calls.append([str(arg) for arg in args])
        named = [str(args[i + 1]) for i, arg in enumerate(args) if arg == "--model"]
        return {"models": {model: {"tasks": {"qa": {"mean": None}}} for model in named}}  # no cell finished

    monkeypatch.setattr(sys.modules["ttq"], "bertkit", evaluate_command)
    grid = tuple(float(x) for x in variants.FULL_LRS.split(","))
    models = {"bert": str(tmp_path / "bert"), "xlnet": str(tmp_path / "xlnet")}
    for mode in ("full", "probe"):
        variants.evaluate(tmp_path, models, mode, tmp_path, False, 1, grid)
    variants.qa_scores(tmp_path, models, tmp_path, False, 1, grid)
    modes = ["probe" if "--probe" in call else "full" for call in calls]
    assert modes == ["full", "full", "probe", "probe", "full"]  # BERT with QA, XLNet without, each mode; then QA
    own, _ = load_suite("local")
    every = [task.name for task in own.tasks]
    tasks = [parse_names(call[call.index("--tasks") + 1]) for call in calls]
    # the shipped suite cut by bertkit's own --tasks: all of it for BERT, all but QA and the bi-encoder tasks for
    # XLNet, then QA alone
    for_xlnet = [name for name in every if name not in variants.NOT_FOR_XLNET]
    assert tasks == [every, for_xlnet, every, for_xlnet, ["qa"]] and "qa" in every and "qa" not in for_xlnet
    for call, mode, names in zip(calls, modes, tasks, strict=True):
        assert call[call.index("--suite") + 1] == "local" and "--seeds" not in call  # the suite's three seeds
        suite = own.with_tasks(names)
        if mode == "probe":
            assert "--lrs" not in call
            continue
        rates = parse_rates(call[call.index("--lrs") + 1])
        assert rates == list(grid)
        graded = suite.with_rates(rates, probe=False)
        for task in graded.tasks:
            assert graded.grid(task, probe=False)[0] == list(grid), task.name
            assert graded.grid(task, probe=True)[0] == own.grid(own.task(task.name), probe=True)[0], task.name
    assert {tuple(own.grid(task, probe=False)[0]) for task in own.tasks} == {(5e-5,), (1e-4,), (2e-5,)}
    # Without a grid, no --lrs: the suite's own rates.
    calls.clear()
    variants.evaluate(tmp_path, models, "full", tmp_path, False, 1, ())
    assert calls and all("--lrs" not in call for call in calls)
    # A smoke run keeps one seed of the suite's three, through --seeds.
    calls.clear()
    variants.evaluate(tmp_path, models, "probe", tmp_path, True, 1, ())
    assert calls and all(call[call.index("--seeds") + 1] == "0" for call in calls)


def test_an_evaluation_goes_on_from_its_cells_and_starts_again_only_when_bertkit_refuses(
    variants, tmp_path: Path, monkeypatch
) -> None:
    # The bench asks `bertkit evaluate --resume auto` first, so a long evaluation cut off goes on from its finished
    # cells; only bertkit's refusal of that output (another plan, or weights trained again) starts it again.
    import sys

    ttq = sys.modules["ttq"]
    calls: list[list[str]] = []
    outcomes: list = []

    def evaluate_command(*args):
        calls.append([str(arg) for arg in args])
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(ttq, "bertkit", evaluate_command)
    out = tmp_path / "evaluate"

    def run() -> dict:
        return ttq.evaluate_suite(["m"], ("stsb",), tmp_path, out, False, False)

    outcomes[:] = [{"report": 1}]
    assert run() == {"report": 1} and calls[-1][-2:] == ["--resume", "auto"] and "--overwrite" not in calls[-1]
    refused = RuntimeError(f"bertkit evaluate failed: error: --resume: {out} was started with --seeds 0; resume with "
                           "the same ..., or choose another --output (or --overwrite to start again)")  # fmt: skip
    outcomes[:] = [refused, {"report": 2}]
    assert run() == {"report": 2} and calls[-1][-1] == "--overwrite" and calls[-1][:-1] == calls[-2][:-2]
    outcomes[:] = [RuntimeError("bertkit evaluate failed: error: a worker process died (out of memory?)")]
    with pytest.raises(RuntimeError, match="worker process died"):
        run()
    assert len(calls) == 4  # a failure of the cells themselves is not answered by starting again


def test_prepare_only_builds_every_input_and_trains_nothing(
    variants, tmp_path: Path, monkeypatch, capsys, text_file: Path
) -> None:
    """`--prepare-only` on real text (Python's documentation, the `text_file` fixture's): the text split, the
    tokenizer, SpanBERT's corpora and RoBERTa's (the untrained floor's), the suite's files and the QA split, and no
    pretraining run nor report. Run again with the same options on a copy of the folder and of the text, as on the
    machine that trains, it builds nothing; with another text it refuses the folder."""
    import sys

    work = tmp_path / "work"
    argv = ["variants.py", "--work", str(work), "--text", str(text_file), "--variants", "spanbert", "--budget",
            "2e12flop", "--downstream", "probe", "--smoke", "--qa", "60,30", "--prepare-only"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    variants.main()
    prepared = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["prepared"]
    expected = {"train", "held", "held-documents", "tok", "corpus-spanbert", "held-spanbert", "corpus-roberta",
                "held-roberta", "suite", "qa-suite"}  # fmt: skip
    assert set(prepared) == expected and all(Path(path).exists() for path in prepared.values())
    assert (Path(prepared["corpus-spanbert"]) / "manifest.json").is_file()
    assert "qa60-30" in prepared["qa-suite"] and (Path(prepared["suite"]) / "sentiment").is_dir()
    assert not (work / "runs").exists() and not (work / "report.json").exists()

    def refuse(*args: object) -> None:
        raise AssertionError(f"built again: bertkit {args[0]}")

    # On the machine that trains: the folder and the text at other paths, the same options.
    moved, text_copy = tmp_path / "elsewhere" / "work", tmp_path / "elsewhere" / "text.txt"
    shutil.copytree(work, moved)
    shutil.copyfile(text_file, text_copy)
    argv[argv.index(str(work))], argv[argv.index(str(text_file))] = str(moved), str(text_copy)
    monkeypatch.setattr(variants, "bertkit", refuse)
    before = {path: path.stat().st_mtime_ns for path in moved.rglob("*") if path.is_file()}
    variants.main()
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["prepared"]
    assert again == {key: path.replace(str(work), str(moved)) for key, path in prepared.items()}
    assert {path: path.stat().st_mtime_ns for path in moved.rglob("*") if path.is_file()} == before
    # Another text is refused in that folder.
    text_copy.write_text(text_file.read_text("utf-8") + "\n\nOne more document.\n", "utf-8")
    with pytest.raises(SystemExit, match="holds runs on a text with sha256"):
        variants.main()


def test_a_run_made_before_its_recipe_changed_trains_again(variants, tmp_path: Path, monkeypatch) -> None:
    """A finished ELECTRA run whose key names the recipe as it resolved before (BERT's 80/10/10 masks in place of
    ELECTRA's 85% [MASK], 15% kept) is not reused; the key names the recipe as it resolves now."""
    work = tmp_path / "work"
    current = variants.reuse_key("electra", "4e14flop", variants.VARIANT_SETTINGS["electra"])
    older = current.replace(variants.recipe_identity("electra-small"), "0123456789abcdef")
    assert older != current
    finished_run(work, "electra", older, old_place=work)
    calls: list[tuple] = []
    summary = {"model_dir": str(work / "runs" / "electra" / "model"), "steps": 3030, "tokens": 1, "flops": 4e14}

    def pretrain_run(*args):  # what bertkit pretrain leaves: the run's folder with its summary
        calls.append(args)
        (work / "runs" / "electra").mkdir(parents=True, exist_ok=True)
        (work / "runs" / "electra" / "summary.json").write_text(json.dumps(summary), "utf-8")
        return summary

    monkeypatch.setattr(variants, "bertkit", pretrain_run)
    variants.pretrain({"corpus-electra": work / "corpus-electra"}, work, "electra", "4e14flop")
    assert len(calls) == 1 and calls[0][0] == "pretrain"
    assert (work / "runs" / "electra" / "bench-budget.txt").read_text("utf-8") == current
    calls.clear()
    variants.pretrain({"corpus-electra": work / "corpus-electra"}, work, "electra", "4e14flop")
    assert calls == []


def test_the_recipe_identity_follows_what_shapes_training(variants, tmp_path: Path) -> None:
    """ELECTRA's recipe with BERT's 80/10/10 masks in place of its own split is another recipe; its description, or
    how often it logs, is not."""
    import yaml

    from bertkit.config.recipe import resolve_recipe_path

    own = yaml.safe_load(resolve_recipe_path("electra-small").read_text("utf-8"))
    copies = {}
    for name, change in {"same": {}, "described": {"description": "another text"},
                         "logged": {"train": {**own["train"], "log_every": 7}},
                         "bert-masks": {"data": {"masking": {"prob": 0.15, "mask_fraction": 0.8,
                                                             "random_fraction": 0.1}}}}.items():  # fmt: skip
        copies[name] = tmp_path / f"{name}.yaml"
        copies[name].write_text(yaml.safe_dump({**own, **change}), "utf-8")
    identity = variants.recipe_identity("electra-small")
    assert [variants.recipe_identity(copies[n]) for n in ("same", "described", "logged")] == [identity] * 3
    assert variants.recipe_identity(copies["bert-masks"]) != identity
