"""Time to quality against the baseline a user would otherwise run: `bertkit pretrain -r crammed-bert` (at the
issue's shape: 4 layers, 256 wide) and transformers' Trainer in run_mlm's way, the same text, tokenizer, shape,
batch and evaluator (the Trainer at the issue's peak rate of 1e-3, the recipe at its own 2e-3), the same time
budget, one after the other with the whole machine each (the issue's setting; tests/bench/ttq.py says how the data
is made and scored). Then both models at equal time, and bertkit's encoder untrained, through `bertkit evaluate` on
the shipped `local` suite's tasks (real sets, 3 seeds; its QA and QNLI tasks come from SQuAD v1.1 dev, whose
articles the pretraining text, SQuAD v1.1 train's paragraphs, does not hold), with the probe and then with full
fine-tuning.

The budget is BERTKIT_TTQ_MINUTES (default 55, the documented run's; the bench takes about twice that). Asserted:
that the Trainer's model has left the frequent-token plateau (it gets some of the masked tokens outside the 100
most frequent right), and the issue's targets, which the documented run met with margin: bertkit reaches the
Trainer's final held-out accuracy in at most a third of the Trainer's training time, and at equal time it is at
least 5 points ahead; downstream, bertkit's encoder at equal time probes better on the suite's average than the
Trainer's and than the untrained one, each by more than the larger seed spread. (Full fine-tuning is printed beside
it, not asserted.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench
HERE = Path(__file__).resolve().parent


def test_bertkit_reaches_the_trainers_accuracy_in_a_third_of_its_time(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    minutes = os.environ.get("BERTKIT_TTQ_MINUTES", "55")
    work = Path(os.environ.get("BERTKIT_TTQ_WORK") or tmp_path / "ttq")
    command = [sys.executable, str(HERE / "ttq.py"), "--work", str(work), "--minutes", minutes, "--sequential"]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(report, indent=1))
    subprocess.run([sys.executable, "-m", "bertkit", "plot", str(work / "bertkit-scored"), str(work / "trainer"),
                    "-o", str(work / "time-to-quality.png"), "--target", str(report["trainer_final"]), "--overwrite"],
                   check=True, capture_output=True)  # fmt: skip
    assert report["masked_tokens"] > 5000
    # The targets mean something only against a Trainer whose model has left the frequent-token plateau, where a
    # model gets none of the rarer tokens right (the Trainer's gets 0.000 of them at 5% of a 55-minute budget).
    assert report["trainer_final_rest"] >= 0.03, f"the Trainer is on the plateau; raise BERTKIT_TTQ_MINUTES: {report}"
    reached = report["bertkit_seconds_to_trainer_final"]
    share = reached / report["trainer_seconds"] if reached is not None else None
    ahead = report["bertkit_at_equal"] - report["trainer_at_equal"]
    print(f"time to the Trainer's final accuracy: {share} of its time (target 1/3); {ahead:+.4f} at equal time")
    assert share is not None and share <= 1 / 3, report
    assert ahead >= 0.05, report
    for mode, models in report["downstream"].items():
        for name in ("bertkit", "trainer", "untrained"):
            average = models[name]["average"]
            print(f"local suite, {mode}: {name} {average['mean']:.2f} ± {average['std']:.2f}", models[name]["tasks"])
    probe = {name: report["downstream"]["probe"][name]["average"] for name in ("bertkit", "trainer", "untrained")}
    for other in ("trainer", "untrained"):
        spread = max(probe["bertkit"]["std"], probe[other]["std"])
        assert probe["bertkit"]["mean"] - probe[other]["mean"] > spread, (other, probe)
