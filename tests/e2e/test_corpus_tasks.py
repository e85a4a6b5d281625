"""`build-corpus --tasks N --task-index i` + `corpus merge` against the reference: one `build-corpus` run.

Real text: Python's documentation (the conftest fixture), one paragraph per document so that the corpus
spans several blocks of 256 documents, written as 7 input files of different sizes so that blocks span files
and tasks take unequal slices. The merged corpus must hold the same files, byte for byte, as one build.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import error_line, run_error, run_json, runner

from bertkit.cli.app import app
from bertkit.corpus.build import BuildOptions, build_corpus
from bertkit.corpus.merge import merge_parts
from bertkit.corpus.pack import FORMATS
from bertkit.corpus.shards import Corpus
from bertkit.corpus.tasks import PART_MARKER, part_name, run_task

FILES = 7
TASKS = 3


def write_inputs(text_file: Path, folder: Path) -> list[Path]:
    """The session's text split into FILES input files (docs-K.txt), one paragraph per document."""
    paragraphs = [line for line in text_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    paths = []
    for k in range(FILES):
        chunk = paragraphs[k * len(paragraphs) // FILES : (k + 1) * len(paragraphs) // FILES]
        paths.append(folder / f"docs-{k}.txt")
        paths[-1].write_text("\n\n".join(chunk) + "\n", encoding="utf-8")
    return paths


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory, text_file: Path) -> list[Path]:
    return write_inputs(text_file, tmp_path_factory.mktemp("inputs"))


def corpus_files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def assert_same_corpus(merged: Path, single: Path) -> None:
    one, other = corpus_files(single), corpus_files(merged)
    assert sorted(other) == sorted(one)
    for name, data in one.items():
        assert other[name] == data, f"{name} differs from one build's"


def task_args(inputs: list[Path], tokenizer_dir: Path, parts: Path, extra: list[str], tasks: int = TASKS) -> list[str]:
    return [
        "build-corpus",
        *[arg for p in inputs for arg in ("--input", str(p))],
        "--tokenizer",
        str(tokenizer_dir),
        "--output",
        str(parts),
        "--tasks",
        str(tasks),
        *extra,
    ]


def cli_env() -> dict[str, str]:
    # The tasks are separate processes, as an array job's are; they import this checkout's bertkit.
    root = str(Path(__file__).resolve().parents[2])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}


def run_tasks_as_processes(args: list[str]) -> list[dict]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "bertkit", *args, "--task-index", str(i), "--json", "--quiet"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(),
        )
        for i in range(TASKS)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate()
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


CASES = [
    (fmt, masking, strategy)
    for fmt in FORMATS
    for masking, strategy in (("dynamic", "token"), ("static", "span" if fmt == "single-segment" else "whole-word"))
]


def _cases(fast: list[tuple[str, str, str]]) -> list:
    """Every case; static masking (2-4 s a case on 2 cores) only in the slow suite, but for the `fast` ones."""
    return [
        pytest.param(*case, marks=[] if case in fast or case[1] == "dynamic" else [pytest.mark.slow]) for case in CASES
    ]


@pytest.mark.parametrize(("fmt", "masking", "strategy"), _cases([("sentence-pair", "static", "whole-word")]))
def test_tasks_then_merge_equal_one_build(
    tmp_path: Path, inputs: list[Path], tokenizer_dir: Path, fmt: str, masking: str, strategy: str
) -> None:
    """Every --format and --masking: 3 tasks (called one after the other here; as processes below) + merge."""
    options = BuildOptions(
        format=fmt,
        masking=masking,
        mask_strategy=strategy,
        max_seq_len=64,
        dupe_factor=2 if masking == "static" else 1,
    )
    single = build_corpus(inputs, tokenizer_dir, tmp_path / "single", options)
    parts = tmp_path / "parts"
    done = [run_task(inputs, tokenizer_dir, parts, options, TASKS, i) for i in reversed(range(TASKS))]
    assert all(not d["skipped"] for d in done)
    merged = merge_parts(parts, tmp_path / "merged")
    assert_same_corpus(tmp_path / "merged", tmp_path / "single")
    assert merged["num_sequences"] == single["num_sequences"] > 100
    # The per-part summary adds up to the corpus's own counts.
    assert sum(p["documents"] for p in merged["parts"]) == single["stats"]["documents"]
    assert sum(p["files"] for p in merged["parts"]) == FILES


def _cli_cases() -> list:
    fast = [("packed-documents", "dynamic", "token")]
    return [pytest.param(*case, marks=[] if case in fast else [pytest.mark.slow]) for case in CASES]


@pytest.mark.parametrize(("fmt", "masking", "strategy"), _cli_cases())
def test_task_processes_then_merge_equal_one_build(
    tmp_path: Path, inputs: list[Path], tokenizer_dir: Path, fmt: str, masking: str, strategy: str
) -> None:
    """As an array job runs them: 3 `bertkit build-corpus --tasks 3` processes at once, then `corpus merge`.
    One case in the default suite, every --format x --masking under the slow marker."""
    extra = ["--format", fmt, "--masking", masking, "--mask-strategy", strategy, "--max-seq-len", "64"]
    extra += ["--dupe-factor", "2"] if masking == "static" else []
    single = tmp_path / "single"
    single_args = task_args(inputs, tokenizer_dir, single, extra)
    at = single_args.index("--tasks")
    run_json(*single_args[:at], *single_args[at + 2 :])
    parts = tmp_path / "parts"
    results = run_tasks_as_processes(task_args(inputs, tokenizer_dir, parts, extra))
    assert sorted(r["task"] for r in results) == list(range(TASKS))
    assert sum(r["documents"] for r in results) == Corpus(single).manifest["stats"]["documents"]
    merged = run_json("corpus", "merge", str(parts), "--output", str(tmp_path / "merged"))
    assert [p["task"] for p in merged["parts"]] == list(range(TASKS))
    assert_same_corpus(tmp_path / "merged", single)


def test_a_killed_task_is_redone_alone_on_relaunch(tmp_path: Path, inputs: list[Path], tokenizer_dir: Path) -> None:
    """Task 1 is killed (SIGKILL, its worker pool with it) while it works; the relaunched array skips tasks 0
    and 2 (their parts untouched), redoes task 1, clears its dead temporary directory; merge equals one build."""
    parts = tmp_path / "parts"
    args = task_args(inputs, tokenizer_dir, parts, ["--max-seq-len", "64"])
    for i in (0, 2):
        run_json(*args, "--task-index", str(i))
    # --workers 2: the task starts a process pool after its temporary directory exists, which leaves time
    # to kill it midway.
    victim = subprocess.Popen(
        [sys.executable, "-m", "bertkit", *args, "--task-index", "1", "--workers", "2", "--quiet"],
        env=cli_env(),
        start_new_session=True,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not list(parts.glob(f".{part_name(1, TASKS)}.tmp-*")):
        assert victim.poll() is None, "the task ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    assert not (parts / part_name(1, TASKS)).exists()
    assert len(list(parts.glob(f".{part_name(1, TASKS)}.tmp-*"))) == 1
    before = {i: (parts / part_name(i, TASKS) / PART_MARKER).stat().st_mtime_ns for i in (0, 2)}

    again = [run_json(*args, "--task-index", str(i)) for i in range(TASKS)]
    assert [r["skipped"] for r in again] == [True, False, True]
    assert again[1]["removed_stale_parts"] == 1
    assert not list(parts.glob(".part-*.tmp-*"))
    assert {i: (parts / part_name(i, TASKS) / PART_MARKER).stat().st_mtime_ns for i in (0, 2)} == before

    build_corpus(inputs, tokenizer_dir, tmp_path / "single", BuildOptions(max_seq_len=64))
    merge_parts(parts, tmp_path / "merged")
    assert_same_corpus(tmp_path / "merged", tmp_path / "single")


def test_a_relaunch_with_other_settings_is_refused(tmp_path: Path, inputs: list[Path], tokenizer_dir: Path) -> None:
    from bertkit.tokenizers.train import train_tokenizer

    other_tokenizer_dir = tmp_path / "other-tokenizer"
    train_tokenizer("wordpiece", inputs[:2], other_tokenizer_dir, vocab_size=1000)
    parts = tmp_path / "parts"
    args = task_args(inputs, tokenizer_dir, parts, ["--max-seq-len", "64"])
    run_json(*args, "--task-index", "0")
    other_n = [*task_args(inputs, tokenizer_dir, parts, ["--max-seq-len", "64"], tasks=4), "--task-index", "3"]
    assert f"was started with --tasks {TASKS}, not 4" in run_error(*other_n)
    other_tokenizer = task_args(inputs, other_tokenizer_dir, parts, ["--max-seq-len", "64"])
    assert "was started with another tokenizer" in run_error(*other_tokenizer, "--task-index", "1")
    assert "was started with --max-seq-len 64, not 128" in run_error(*args[:-2], "--task-index", "1")
    fewer = task_args(inputs[:-1], tokenizer_dir, parts, ["--max-seq-len", "64"])
    assert "other --input files" in run_error(*fewer, "--task-index", "1")
    # Nothing of the refused launches was written: task 0's part is the only one.
    assert sorted(p.name for p in parts.iterdir()) == ["part-00000-of-00003", "plan"]
    # Merging before every task finished names the missing ones.
    line = run_error("corpus", "merge", str(parts), "--output", str(tmp_path / "corpus"))
    assert "2 of 3 tasks have not finished (task 1,2)" in line
    assert not (tmp_path / "corpus").exists()


def test_the_task_index_comes_from_slurm(
    tmp_path: Path, inputs: list[Path], tokenizer_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = tmp_path / "parts"
    args = task_args(inputs, tokenizer_dir, parts, [])
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    assert run_json(*args)["task"] == 2
    assert (parts / part_name(2, TASKS) / PART_MARKER).is_file()
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    assert "--array=0-2" in run_error(*args)
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID")
    assert "needs --task-index" in run_error(*args)
    assert "--overwrite does not apply" in run_error(*args, "--task-index", "0", "--overwrite")


def test_a_damaged_part_is_caught_by_its_checksum(tmp_path: Path, inputs: list[Path], tokenizer_dir: Path) -> None:
    parts = tmp_path / "parts"
    options = BuildOptions(max_seq_len=64)
    for i in range(TASKS):
        run_task(inputs, tokenizer_dir, parts, options, TASKS, i)
    ids = parts / part_name(1, TASKS) / "ids.bin"
    data = bytearray(ids.read_bytes())
    data[100] ^= 0xFF
    ids.write_bytes(bytes(data))
    result = runner.invoke(app, ["corpus", "merge", str(parts), "--output", str(tmp_path / "corpus")])
    line = error_line(result)
    assert "ids.bin does not match its checksum" in line and "relaunch task 1" in line
    assert not (tmp_path / "corpus").exists()


SBATCH_STANDIN = """#!/bin/bash
# Stand-in for sbatch: runs the job here and now (an array's tasks as concurrent processes, each with its
# SLURM_ARRAY_TASK_ID), honours --dependency=afterok, logs each task to $SBATCH_STATE, prints the job id.
array= dep= wrap=
while [[ $# -gt 0 && $1 == -* ]]; do
    case $1 in
        --array=*) array=${1#--array=} ;;
        --dependency=afterok:*) dep=${1#--dependency=afterok:} ;;
        --wrap=*) wrap=${1#--wrap=} ;;
    esac
    shift
done
id=$(cat "$SBATCH_STATE/next" 2>/dev/null || echo 100)
echo $((id + 1)) > "$SBATCH_STATE/next"
if [ -n "$dep" ] && [ -e "$SBATCH_STATE/failed-$dep" ]; then echo "$id"; exit 0; fi
status=0
if [ -n "$array" ]; then
    pids=()
    for i in $(seq "${array%-*}" "${array#*-}"); do
        SLURM_JOB_ID=$id SLURM_ARRAY_JOB_ID=$id SLURM_ARRAY_TASK_ID=$i SLURM_CPUS_PER_TASK=1 \\
            bash "$@" > "$SBATCH_STATE/$id-$i.out" 2>&1 &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || status=1; done
else
    SLURM_JOB_ID=$id bash -c "$wrap" > "$SBATCH_STATE/$id.out" 2>&1 || status=1
fi
[ "$status" -eq 0 ] || touch "$SBATCH_STATE/failed-$id"
echo "$id"
"""
SRUN_STANDIN = "#!/bin/bash\n# Stand-in for srun: its options dropped, the command run here.\n"
SRUN_STANDIN += 'while [[ $1 == -* ]]; do shift; done\nexec "$@"\n'


@pytest.mark.slow  # 9 s: ten bertkit processes
def test_the_slurm_example_builds_and_merges_and_relaunches(
    tmp_path: Path, inputs: list[Path], tokenizer_dir: Path
) -> None:
    """examples/slurm/build-corpus.sbatch under stand-ins for sbatch and srun: submitted from the "login node",
    it runs a 3-task array and a merge that waits for it (afterok). Task 1 fails the first time (its part name
    is taken by a file), so the merge does not run; the same command again skips tasks 0 and 2, builds task 1,
    and the merged corpus equals one build-corpus run."""
    script = Path(__file__).resolve().parents[2] / "examples" / "slurm" / "build-corpus.sbatch"
    fake, state = tmp_path / "bin", tmp_path / "sbatch"
    fake.mkdir()
    state.mkdir()
    (fake / "sbatch").write_text(SBATCH_STANDIN)
    (fake / "srun").write_text(SRUN_STANDIN)
    for tool in fake.iterdir():
        tool.chmod(0o755)
    parts, corpus = tmp_path / "parts", tmp_path / "corpus"
    parts.mkdir()
    (parts / part_name(1, TASKS)).write_text("in the way")
    env = {
        **cli_env(),
        "PATH": f"{fake}:{os.environ['PATH']}",
        "SBATCH_STATE": str(state),
        "INPUT": " ".join(map(str, inputs)),
        "TOKENIZER": str(tokenizer_dir),
        "PARTS": str(parts),
        "CORPUS": str(corpus),
        "TASKS": str(TASKS),
        "BERTKIT": f"{sys.executable} -m bertkit",
    }
    env.pop("SLURM_ARRAY_TASK_ID", None)
    command = ["bash", str(script), "--max-seq-len", "64", "--json", "--quiet"]

    def submit() -> tuple[str, str]:
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        array_job, merge_job = done.stdout.split("array job ")[1].split()[0], done.stdout.split()[-1]
        return array_job, merge_job

    array_job, merge_job = submit()
    assert (state / f"failed-{array_job}").exists()
    assert "error: output" in (state / f"{array_job}-1.out").read_text()
    assert not (state / f"{merge_job}.out").exists() and not corpus.exists()  # afterok: the merge never ran

    (parts / part_name(1, TASKS)).unlink()
    array_job, merge_job = submit()
    logs = [json.loads((state / f"{array_job}-{i}.out").read_text().strip().splitlines()[-1]) for i in range(TASKS)]
    assert [log["skipped"] for log in logs] == [True, False, True]
    assert "corpus merged" in (state / f"{merge_job}.out").read_text()
    build_corpus(inputs, tokenizer_dir, tmp_path / "single", BuildOptions(max_seq_len=64))
    assert_same_corpus(corpus, tmp_path / "single")


def test_the_xlnet_layout_merges_like_one_build(tmp_path: Path, inputs: list[Path], tokenizer_dir: Path) -> None:
    options = BuildOptions(format="sentence-pair", layout="xlnet", max_seq_len=64)
    build_corpus(inputs, tokenizer_dir, tmp_path / "single", options)
    for i in range(TASKS):
        run_task(inputs, tokenizer_dir, tmp_path / "parts", options, TASKS, i)
    merge_parts(tmp_path / "parts", tmp_path / "merged")
    assert_same_corpus(tmp_path / "merged", tmp_path / "single")


def test_a_relaunch_after_an_input_changed_is_refused(tmp_path: Path, inputs: list[Path], tokenizer_dir: Path) -> None:
    copies = []
    for path in inputs:
        copies.append(tmp_path / path.name)
        copies[-1].write_bytes(path.read_bytes())
    parts = tmp_path / "parts"
    run_json(*task_args(copies, tokenizer_dir, parts, []), "--task-index", "0")
    with open(copies[3], "a", encoding="utf-8") as handle:
        handle.write("One more paragraph, appended after the first task ran.\n")
    line = run_error(*task_args(copies, tokenizer_dir, parts, []), "--task-index", "1")
    assert line.startswith(f"error: input {copies[3]} changed (size or time) since {parts} was started")
