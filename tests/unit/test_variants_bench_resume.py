"""The variants bench (tests/bench/variants.py) goes on with an interrupted pretraining run from its last checkpoint
when it is run again with the same options, and starts afresh a run interrupted under other options."""

from __future__ import annotations

from pathlib import Path

import pytest


def interrupted_run(work: Path, key: str, checkpoint: bool = True) -> Path:
    """What a run killed part-way leaves: its folder with a checkpoint (or none yet), no summary, and the key it
    was started under."""
    run = work / "runs" / "electra"
    (run / "checkpoints" / "step-250").mkdir(parents=True) if checkpoint else run.mkdir(parents=True)
    (work / "runs" / "electra.started").write_text(key, "utf-8")
    return run


class Recorder:
    """Stands in for the bertkit command: records each call and what the bench had written when it was made."""

    def __init__(self, work: Path, fail: bool = False) -> None:
        self.work, self.fail, self.calls, self.started_at_call, self.folder_at_call = work, fail, [], [], []

    def __call__(self, *args):
        self.calls.append(args)
        started = self.work / "runs" / "electra.started"
        self.started_at_call.append(started.read_text("utf-8") if started.exists() else None)
        folder = self.work / "runs" / "electra"
        self.folder_at_call.append(sorted(map(str, folder.rglob("*"))) if folder.exists() else None)
        if self.fail:
            raise SystemExit("bertkit pretrain failed")
        return {"model_dir": str(self.work / "runs" / "electra" / "model"), "steps": 3033, "tokens": 1, "flops": 4e14}


def run_electra(variants, work: Path, budget: str = "4e14flop") -> dict:
    return variants.pretrain({"corpus-electra": work / "corpus-electra"}, work, "electra", budget)


def key(variants, budget: str = "4e14flop") -> str:
    return variants.reuse_key("electra", budget, variants.VARIANT_SETTINGS["electra"])


def test_an_interrupted_run_goes_on_from_its_checkpoint(variants, tmp_path: Path, monkeypatch) -> None:
    work = tmp_path / "work"
    run = interrupted_run(work, key(variants))
    bertkit = Recorder(work)
    monkeypatch.setattr(variants, "bertkit", bertkit)
    row = run_electra(variants, work)
    (call,) = bertkit.calls
    assert call[call.index("--resume") + 1] == "last" and "--overwrite" not in call
    assert call[call.index("-o") + 1] == run and call[call.index("--budget") + 1] == "4e14flop"
    assert f"train.checkpoint_every={variants.CHECKPOINT_EVERY}" in call
    assert (run / "bench-budget.txt").read_text("utf-8") == key(variants)
    assert not (work / "runs" / "electra.started").exists()
    assert row["steps"] == 3033
    # Finished now (the summary is bertkit's to write): the next bench reuses it.
    (run / "summary.json").write_text('{"model_dir": "model", "steps": 3033, "tokens": 1, "flops": 4e14}', "utf-8")
    bertkit.calls.clear()
    run_electra(variants, work)
    assert bertkit.calls == []


@pytest.mark.parametrize("started", ["other budget", "no key", "no checkpoint", "half-written checkpoint"])
def test_a_run_interrupted_otherwise_starts_afresh(variants, tmp_path: Path, monkeypatch, started: str) -> None:
    """Interrupted under another budget, by a bench that wrote no key (an older one), before its first checkpoint,
    or while writing it: trained from the start under the key it runs with now, what the folder held (another
    run's checkpoint) gone before the key is written."""
    work = tmp_path / "work"
    run = interrupted_run(work, key(variants, "2e14flop") if started == "other budget" else key(variants),
                          checkpoint=started not in ("no checkpoint", "half-written checkpoint"))  # fmt: skip
    if started == "no key":
        (work / "runs" / "electra.started").unlink()
    if started == "half-written checkpoint":  # a checkpoint is written under a temporary name, then renamed
        (run / "checkpoints" / ".step-250.tmp").mkdir(parents=True)
    bertkit = Recorder(work)
    monkeypatch.setattr(variants, "bertkit", bertkit)
    run_electra(variants, work)
    (call,) = bertkit.calls
    assert "--overwrite" in call and "--resume" not in call
    assert bertkit.started_at_call == [key(variants)]  # the key is down before the run starts
    assert bertkit.folder_at_call == [None]  # and nothing of the interrupted run is left beside it
    assert not (work / "runs" / "electra.started").exists()


def test_a_failed_run_keeps_its_key_so_the_next_bench_goes_on(variants, tmp_path: Path, monkeypatch) -> None:
    work = tmp_path / "work"
    monkeypatch.setattr(variants, "bertkit", Recorder(work, fail=True))
    with pytest.raises(SystemExit):
        run_electra(variants, work)
    assert (work / "runs" / "electra.started").read_text("utf-8") == key(variants)
    assert not (work / "runs" / "electra" / "bench-budget.txt").exists()
    (work / "runs" / "electra" / "checkpoints" / "step-500").mkdir(parents=True)  # what the run had written
    bertkit = Recorder(work)
    monkeypatch.setattr(variants, "bertkit", bertkit)
    run_electra(variants, work)
    assert "--resume" in bertkit.calls[0]
