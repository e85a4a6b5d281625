"""Pretraining in phases (a recipe's `phases:`, bertkit/pipelines/phases.py): modernbert-tiny stable on 64-token
sequences, a context extension on 128-token ones with the global rotary base raised, then the decay alone; one run
directory; killed inside the second phase and resumed, it ends on the uninterrupted run's weights. Data: the session's
corpus of Python's documentation (conftest.py), and a second one of the same text at 128 tokens."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from cli_helpers import run_error, run_json
from safetensors.torch import load_file

from bertkit.config.recipe import resolve_recipe_path

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def phased(tmp_path_factory: pytest.TempPathFactory, text_file: Path, tokenizer_dir: Path) -> tuple[Path, Path]:
    """The shipped modernbert-tiny-phases recipe at a few steps a phase, and the 128-token corpus its later phases
    read (--corpus long=DIR)."""
    from bertkit.corpus.build import BuildOptions, build_corpus

    folder = tmp_path_factory.mktemp("phases")
    build_corpus([text_file], tokenizer_dir, folder / "long", BuildOptions(max_seq_len=128))
    raw = yaml.safe_load(resolve_recipe_path("modernbert-tiny-phases").read_text("utf-8"))
    raw["train"].update(batch_size=8, log_every=1, eval_batches=1, checkpoint_every=1, keep_last=10)
    raw["optim"]["name"] = "adamw"
    steps = {"stable": 4, "extension": 3, "decay": 3}
    for phase in raw["phases"]:
        phase["set"] = [item for item in phase["set"] if not item.startswith("train.steps")]
        phase["set"].append(f"train.steps={steps[phase['name']]}")
    raw["schedule"]["warmup_steps"] = 1
    path = folder / "tiny-phases.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), "utf-8")
    return path, folder / "long"


def _lrs(run: Path) -> list[float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [row["lr"] for row in rows if "loss" in row]


def test_three_phases_run_in_one_directory_and_resume_across_a_boundary(
    phased: tuple[Path, Path], corpus_dir: Path, tmp_path: Path
) -> None:
    recipe, long = phased
    args = ["pretrain", "-r", str(recipe), "-c", str(corpus_dir), "-c", f"long={long}"]
    run = tmp_path / "run"
    out = run_json(*args, "-o", str(run))
    assert [p["phase"] for p in out["phases"]] == ["stable", "extension", "decay"] and out["steps"] == 10
    stable, extension, decay = out["phases"]
    # the run's summary is the phases' together, and reads back as the --json line gave it
    from bertkit.pipelines.summary import PhasedPretrainSummary, read_summary

    saved = read_summary(run, PhasedPretrainSummary)
    assert saved.as_json() == out and saved.tokens == sum(p.tokens or 0 for p in saved.phases) > 0
    assert saved.loss_first == stable["loss_first"] and saved.eval == decay["eval"]
    assert extension["init"]["extended"]["context"] == "global_rope_theta 160000 -> 640000"  # a fresh optimizer
    # The extension phase is what `--init-from` of the first phase's model does with the phase's settings.
    raw = yaml.safe_load(recipe.read_text("utf-8"))
    phase_sets = [item for phase in raw.pop("phases")[:2] for item in phase["set"]]
    single = tmp_path / "single.yaml"
    single.write_text(yaml.safe_dump(raw, sort_keys=False), "utf-8")
    run_json("pretrain", "-r", str(single), "-c", str(long), "--init-from", str(run / "phases" / "00-stable" / "model"),
             *[arg for item in phase_sets for arg in ("--set", item)], "-o", str(tmp_path / "by-init-from"))
    a = load_file(str(tmp_path / "by-init-from" / "model" / "model.safetensors"))
    b = load_file(str(run / "phases" / "01-extension" / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)
    assert decay["decay"]["data"] == "continued from the checkpoint" and decay["decay"]["shape"] == "1-sqrt"
    # the rate logged after each step is the next step's: 1-sqrt from the peak 5e-4 over 3 steps, down to 0
    lrs = _lrs(run / "phases" / "02-decay")
    assert lrs == pytest.approx([5e-4 * (1 - (k / 3) ** 0.5) for k in (1, 2, 3)], abs=1e-9)
    assert (run / "model" / "model.safetensors").is_file()
    # killed after the extension's first step: its later checkpoints, its end and the decay never happened
    again = tmp_path / "again"
    shutil.copytree(run, again)
    for path in ("model", "summary.json", "phases/02-decay", "phases/01-extension/model",
                 "phases/01-extension/summary.json", "phases/01-extension/checkpoints/step-2",
                 "phases/01-extension/checkpoints/step-3"):  # fmt: skip
        target = again / path
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    resumed = run_json(*args, "-o", str(again), "--resume", "auto")
    assert resumed["steps"] == 10
    a = load_file(str(again / "model" / "model.safetensors"))
    b = load_file(str(run / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


def _refused(raw: dict, output: Path, corpus_dir: Path, long: Path) -> str:
    """The error line of a phased run of the recipe `raw` (written beside `output`), which must write nothing."""
    path = output.with_suffix(".yaml")
    path.write_text(yaml.safe_dump(raw), "utf-8")
    line = run_error("pretrain", "-r", str(path), "-c", str(corpus_dir), "-c", f"long={long}", "-o", str(output))
    assert not output.exists()
    return line


def test_bad_phases_are_one_line(phased: tuple[Path, Path], corpus_dir: Path, tmp_path: Path) -> None:
    recipe, long = phased
    line = run_error("pretrain", "-r", str(recipe), "-c", str(corpus_dir), "-o", str(tmp_path / "a"))
    assert "phase 'extension' trains on corpus 'long', which no --corpus long=DIR gives" in line
    assert not (tmp_path / "a").exists()
    shrinking = yaml.safe_load(recipe.read_text("utf-8"))
    shrinking["phases"][1]["set"].append("model.max_position_embeddings=256")
    line = _refused(shrinking, tmp_path / "b", corpus_dir, long)
    assert "phase 'extension' shrinks model.max_position_embeddings from 512 to 256" in line
    short = yaml.safe_load(recipe.read_text("utf-8"))
    short["phases"][1]["set"] = [item for item in short["phases"][1]["set"] if "max_position_embeddings" not in item]
    short["model"] = {**short.get("model", {}), "max_position_embeddings": 64}
    line = _refused(short, tmp_path / "d", corpus_dir, long)
    assert "phase 'extension' reads 128-token sequences of corpus 'long' but its model has 64 positions" in line
    line = run_error("pretrain", "-r", "modernbert-tiny", "-c", str(corpus_dir), "-c", f"long={long}",
                     "-o", str(tmp_path / "c"))  # fmt: skip
    assert "has no phases; give the corpus directory alone" in line


def test_every_shipped_phased_recipe_validates_phase_by_phase() -> None:
    """modernbert-base and crammed-bert as stable -> extension -> decay: each phase's recipe validates, the extension
    raises the global rotary base and changes nothing it may not, and the decay is the last phase's."""
    from bertkit.config.recipe import load_recipe
    from bertkit.pipelines.phases import phase_recipes

    for name in ("modernbert-base-phases", "crammed-bert-phases", "modernbert-tiny-phases"):
        phases = phase_recipes(load_recipe(name), {"long": "/data/long"})
        assert [phase.name for phase, _ in phases] == ["stable", "extension", "decay"], name
        (_, stable), (_, extension), (decay, last) = phases
        assert extension.model.global_rope_theta > stable.model.global_rope_theta, name
        assert extension.model.local_rope_theta == stable.model.local_rope_theta, name
        assert decay.decay and str(last.data.train) == "/data/long", name


def test_a_phased_run_killed_inside_its_second_phase_resumes_bitwise(phased: tuple[Path, Path], corpus_dir: Path,
                                                                    tmp_path: Path) -> None:  # fmt: skip
    """SIGKILL once the extension's first checkpoint is written (its 12 steps still under way); `--resume auto`
    keeps the finished stable phase, resumes the extension from that checkpoint, runs the decay, and ends on the
    uninterrupted run's weights, bitwise. Every run is a process of its own on one thread, as the killed one is."""
    import os
    import signal
    import subprocess
    import sys

    from test_resume import run_until

    recipe, long = phased
    raw = yaml.safe_load(recipe.read_text("utf-8"))
    raw["phases"][1]["set"] = [item for item in raw["phases"][1]["set"] if not item.startswith("train.steps")]
    raw["phases"][1]["set"].append("train.steps=12")
    longer = tmp_path / "longer.yaml"
    longer.write_text(yaml.safe_dump(raw, sort_keys=False), "utf-8")
    command = [sys.executable, "-m", "bertkit", "pretrain", "-r", str(longer), "-c", str(corpus_dir), "-c",
               f"long={long}", "--quiet", "--json"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def run(*args: str) -> dict:
        done = subprocess.run([*command, *args], capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    reference = run("-o", str(tmp_path / "whole"))
    killed = run_until([*command, "-o", str(tmp_path / "killed")],
                       tmp_path / "killed" / "phases" / "01-extension" / "checkpoints" / "step-1", signal.SIGKILL,
                       env=env)  # fmt: skip
    assert killed.returncode == -signal.SIGKILL
    assert not (tmp_path / "killed" / "phases" / "01-extension" / "model").exists()  # killed inside the phase
    resumed = run("-o", str(tmp_path / "killed"), "--resume", "auto")
    assert resumed["steps"] == reference["steps"] == 4 + 12 + 3
    a = load_file(str(tmp_path / "killed" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "whole" / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)
