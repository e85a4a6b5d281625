"""Experiment tracking, read back through each tracker's own reader: MLflow's client against a real
`mlflow server` (SQLite backend in a temporary directory) started here on 127.0.0.1, and against a
`sqlite:///` store with no server; W&B's offline run file through a reader of its transaction log (below) and
wandb's own protobuf schema for its records.

One job is one run: a 2-process DDP pretraining logs exactly one run from rank 0; a run killed (SIGKILL)
after a checkpoint and resumed continues the same run with every step logged once; a server that stops
mid-run costs one warning, never the run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from test_resume import run_until

from bertkit.engine.preflight import flatten

mlflow = pytest.importorskip("mlflow")

STEPS = 12
EVAL_EVERY = 4


def sets(**extra: object) -> list[str]:
    values = {
        "train.steps": STEPS,
        "train.batch_size": 8,
        "train.log_every": 1,
        "train.checkpoint_every": 4,
        "train.eval_every": EVAL_EVERY,
        "train.eval_batches": 1,
        "engine.threads": 1,
        "engine.tensorboard": "false",
        **extra,
    }
    return [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]


def pretrain_command(corpus: Path, output: Path, *extra: str, procs: int = 1) -> list[str]:
    launcher = [sys.executable]
    if procs > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={procs}"]
    return [*launcher, "-m", "bertkit", "pretrain", "-r", "bert-tiny", "-c", str(corpus), "-o", str(output),
            *extra, "--quiet", "--json"]  # fmt: skip


def tracker_env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "WANDB_"))}
    env.update(values)
    # A tracking server that is gone fails at once instead of after MLflow's minutes of retries.
    env.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    env.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    return env


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    result = subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(folder: Path) -> tuple[subprocess.Popen, str]:
    """`mlflow server` on 127.0.0.1 with a SQLite store and served artifacts, both under `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    args = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
            "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
            "--artifacts-destination", str(folder / "artifacts")]  # fmt: skip
    log = open(folder / "server.log", "w")  # noqa: SIM115
    server = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=folder, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        assert server.poll() is None, (folder / "server.log").read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return server, url
        except OSError:
            pass
        assert time.monotonic() < deadline, "mlflow server did not start"
        time.sleep(0.5)


def stop_server(server: subprocess.Popen) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)  # the server's own session: uvicorn and its workers
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server, url = start_server(tmp_path_factory.mktemp("mlflow-server"))
    yield url
    stop_server(server)


def metrics_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def expected_series(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """metrics.jsonl as tracker series: every numeric value of every row, by step, each key once per step
    (the first row's: an evaluation row may repeat a figure of its step's training row)."""
    series: dict[str, list[tuple[int, float]]] = {}
    for row in metrics_rows(run_dir):
        for key, value in row.items():
            if key != "step" and isinstance(value, int | float):
                points = series.setdefault(key, [])
                if not points or points[-1][0] < row["step"]:
                    points.append((row["step"], float(value)))
    return series


WALL_CLOCK = ("tokens_per_s", "mfu", "train_seconds")  # figures of the attempt that logged them


def mlflow_series(client, run_id: str, keys) -> dict[str, list[tuple[int, float]]]:
    return {key: [(m.step, m.value) for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)]
            for key in keys}  # fmt: skip


def recipe_params(run_dir: Path) -> dict[str, str]:
    """The resolved recipe of the run directory, flattened to dotted keys, as MLflow's string parameters."""
    recipe = yaml.safe_load((run_dir / "recipe.yaml").read_text())
    return {k: json.dumps(v) if isinstance(v, list | dict) else str(v) for k, v in flatten(recipe).items()}


def assert_matches_metrics_file(client, run_id: str, run_dir: Path, steps: int = STEPS) -> None:
    """Every series of metrics.jsonl, step by step, each step once; plus peak memory on every training row."""
    expected = expected_series(run_dir)
    run = client.get_run(run_id)
    assert set(expected) | {"peak_memory_mib"} == set(run.data.metrics)
    got = mlflow_series(client, run_id, expected)
    for key, points in expected.items():
        assert [s for s, _ in got[key]] == [s for s, _ in points], key  # same steps, none twice
        if key in WALL_CLOCK:
            continue  # wall-clock figures: a killed attempt's steps keep the timing they were logged with
        for (_, value), (_, reference) in zip(got[key], points, strict=True):
            assert value == pytest.approx(reference, rel=1e-6), key
    memory = client.get_metric_history(run_id, "peak_memory_mib")
    assert sorted(m.step for m in memory) == list(range(1, steps + 1))
    assert all(m.value > 0 for m in memory)


@pytest.mark.slow  # a real server's start-up and a 2-process run: about 80 s on 2 cores
def test_ddp_run_is_one_mlflow_run_on_a_real_server(corpus_dir: Path, mlflow_server: str, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    output = tmp_path / "ddp"
    env = tracker_env(MLFLOW_TRACKING_URI=mlflow_server, MLFLOW_EXPERIMENT_NAME="ddp-test")
    args = pretrain_command(corpus_dir, output, *sets(**{"track.log_model": "true"}), "--engine", "ddp",
                            "--report-to", "mlflow", procs=2)  # fmt: skip
    result = run(args, env, tmp_path)
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert "tracking failed" not in result.stderr

    client = MlflowClient(mlflow_server)
    experiment = client.get_experiment_by_name("ddp-test")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1  # rank 0 only: one run, not one per process
    run_id = runs[0].info.run_id
    assert json.loads((output / "tracking.json").read_text())["mlflow"]["run_id"] == run_id
    assert runs[0].info.status == "FINISHED" and runs[0].info.run_name == "ddp"
    assert_matches_metrics_file(client, run_id, output)
    eval_steps = [m.step for m in client.get_metric_history(run_id, "eval_mlm_loss")]
    assert sorted(eval_steps) == list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY))

    params = runs[0].data.params
    recipe = recipe_params(output)
    assert {k: v for k, v in params.items() if not k.startswith(("bertkit.", "input."))} == recipe
    assert recipe["track.report_to"] == '["mlflow"]' and recipe["engine.backend"] == "ddp"
    assert params["bertkit.version"] and "--report-to mlflow" in params["bertkit.command_line"]
    assert len(params["input.corpus"]) == 16  # the pre-flight check's fingerprint of the corpus
    tags = runs[0].data.tags
    assert (tags["bertkit.command"], tags["bertkit.family"], tags["bertkit.engine"], tags["bertkit.world_size"]) == (
        "pretrain", "bert", "ddp", "2")  # fmt: skip

    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {"summary.json", "model"} <= artifacts
    assert "model/model.safetensors" in {a.path for a in client.list_artifacts(run_id, "model")}
    logged = json.loads(Path(client.download_artifacts(run_id, "summary.json", str(tmp_path))).read_text())
    assert logged == json.loads((output / "summary.json").read_text()) == summary


@pytest.mark.slow  # three runs of a subprocess that imports MLflow: about 35 s on 2 cores
def test_killed_after_a_checkpoint_and_resumed_continues_the_same_run(corpus_dir: Path, tmp_path: Path) -> None:
    """SIGKILL once the step-8 checkpoint exists (steps after it may already be in the run), then --resume:
    one run, the same id, every step logged once, equal to the resumed run's metrics.jsonl."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'store.db'}"
    env = tracker_env(MLFLOW_TRACKING_URI=uri)
    output = tmp_path / "run"
    steps = 40  # long enough to be killed well before its end
    args = pretrain_command(corpus_dir, output, *sets(**{"train.steps": steps}), "--report-to", "mlflow")
    # The killed attempt logs a step or two past its checkpoint before the kill.
    killed = run_until(args, output / "checkpoints" / "step-8", signal.SIGKILL, delay=0.2, env=env, cwd=tmp_path)
    assert killed.returncode == -signal.SIGKILL
    first_id = json.loads((output / "tracking.json").read_text())["mlflow"]["run_id"]
    client = MlflowClient(uri)
    assert client.get_run(first_id).info.status == "RUNNING"  # killed: nobody ended it

    run([*args, "--resume"], env, tmp_path)
    assert json.loads((output / "tracking.json").read_text())["mlflow"]["run_id"] == first_id
    runs = client.search_runs(["0"])  # MLflow's Default experiment: no experiment was named
    assert [r.info.run_id for r in runs] == [first_id]
    assert runs[0].info.status == "FINISHED"
    assert_matches_metrics_file(client, first_id, output, steps)
    assert runs[0].data.tags["bertkit.resume_command_line"].endswith("--resume")

    # --overwrite is a new job: a new run.
    run([*args, "--overwrite"], env, tmp_path)
    second_id = json.loads((output / "tracking.json").read_text())["mlflow"]["run_id"]
    assert second_id != first_id and len(client.search_runs(["0"])) == 2


@pytest.mark.slow  # two runs of a subprocess that imports MLflow: 25-55 s on 2 cores
def test_sigterm_ends_the_run_as_killed_and_resume_finishes_it(corpus_dir: Path, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'store.db'}"
    env = tracker_env(MLFLOW_TRACKING_URI=uri)
    output = tmp_path / "run"
    args = pretrain_command(corpus_dir, output, *sets(**{"train.steps": 40}), "--report-to", "mlflow")
    stopped = run_until(args, output / "checkpoints" / "step-4", signal.SIGTERM, env=env, cwd=tmp_path)
    assert stopped.returncode == 130, stopped.stderr[-2000:]
    run_id = json.loads((output / "tracking.json").read_text())["mlflow"]["run_id"]
    client = MlflowClient(uri)
    assert client.get_run(run_id).info.status == "KILLED"
    run([*args, "--resume"], env, tmp_path)
    assert client.get_run(run_id).info.status == "FINISHED"
    assert_matches_metrics_file(client, run_id, output, steps=40)


@pytest.mark.slow  # a real server's start-up: about 40 s on 2 cores
def test_server_stopped_mid_run_costs_one_warning(corpus_dir: Path, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    server, url = start_server(tmp_path / "server")
    output = tmp_path / "run"
    steps = 40
    args = pretrain_command(corpus_dir, output, *sets(**{"train.steps": steps, "train.checkpoint_every": 0}),
                            "--report-to", "mlflow")  # fmt: skip
    env = tracker_env(MLFLOW_TRACKING_URI=url)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        client = MlflowClient(url)
        deadline = time.monotonic() + 300
        while True:  # wait until the run has logged something, then take the server away
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline
            ids = json.loads((output / "tracking.json").read_text()) if (output / "tracking.json").exists() else {}
            if ids and client.get_metric_history(ids["mlflow"]["run_id"], "loss"):
                break
            time.sleep(0.1)
    finally:
        stop_server(server)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "mlflow tracking failed" in warnings[0], err
    assert "Traceback" not in err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["steps"] == steps and summary["eval"]["mlm_loss"] > 0
    assert json.loads((output / "summary.json").read_text()) == summary
    assert [row["step"] for row in metrics_rows(output) if "loss" in row] == list(range(1, steps + 1))


# W&B's transaction log (run-*.wandb): LevelDB's log format (32 KiB blocks of chunks) behind a 7-byte file header.
# wandb.sdk.internal.datastore, its Python reader, is gone from wandb 0.25 on; this format, checksum included, is
# the one that reader read and the one wandb-core writes (checked against wandb 0.31's offline files).
WANDB_LOG_HEADER = struct.pack("<4sHB", b":W&B", 0xBEE1, 0)  # ident, magic, version
WANDB_LOG_BLOCK = 32 * 1024
WANDB_CHUNK_HEADER = 7  # checksum (uint32), length (uint16), type (uint8), little-endian
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def wandb_log_records(log: Path) -> Iterator[bytes]:
    """Each record of a W&B transaction log, in order: one FULL chunk, or FIRST, MIDDLE..., LAST chunks joined.
    Blocks count from the start of the file (the file header opens the first); a chunk never crosses a block
    and a block's last 6 bytes or fewer are zero padding. Each chunk's checksum is zlib's CRC-32 of its type
    byte and data, unmasked (not LevelDB's masked CRC-32C)."""
    data = log.read_bytes()
    assert data[: len(WANDB_LOG_HEADER)] == WANDB_LOG_HEADER, data[: len(WANDB_LOG_HEADER)]
    pos, pending = len(WANDB_LOG_HEADER), None
    while pos < len(data):
        left = WANDB_LOG_BLOCK - pos % WANDB_LOG_BLOCK
        if left < WANDB_CHUNK_HEADER:
            assert data[pos : pos + left] == bytes(left), f"padding at {pos}"
            pos += left
            continue
        checksum, length, kind = struct.unpack_from("<IHB", data, pos)
        assert WANDB_CHUNK_HEADER + length <= left, f"chunk at {pos} crosses a block"
        chunk = data[pos + WANDB_CHUNK_HEADER : pos + WANDB_CHUNK_HEADER + length]
        assert len(chunk) == length, f"chunk at {pos} cut short"
        assert checksum == zlib.crc32(chunk, zlib.crc32(bytes([kind]))), f"checksum of the chunk at {pos}"
        assert (pending is None) == (kind in (FULL, FIRST)), f"chunk type {kind} at {pos}"
        if kind == FULL:
            yield chunk
        elif kind == FIRST:
            pending = [chunk]
        elif kind == MIDDLE:
            pending.append(chunk)
        elif kind == LAST:
            yield b"".join([*pending, chunk])
            pending = None
        else:
            raise AssertionError(f"chunk type {kind} at {pos}")
        pos += WANDB_CHUNK_HEADER + length
    assert pending is None, "the log ends inside a record"


def read_wandb_offline(run_dir: Path) -> tuple[dict, list[dict], dict, dict]:
    """The run record, history rows, config and summary of the run's offline file, read by the transaction-log
    reader above and wandb's own protobuf schema for its records."""
    from wandb.proto import wandb_internal_pb2

    (log,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    run_record: dict = {}
    history: list[dict] = []
    config: dict = {}
    summary: dict = {}
    for data in wandb_log_records(log):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run_record = {"id": record.run.run_id, "name": record.run.display_name, "tags": list(record.run.tags)}
            config.update({item.key: json.loads(item.value_json) for item in record.run.config.update})
        elif kind == "history":
            history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in record.history.item})  # fmt: skip
        elif kind == "config":
            config.update({item.key: json.loads(item.value_json) for item in record.config.update})
        elif kind == "summary":
            summary.update({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in record.summary.update})  # fmt: skip
    return run_record, history, config, summary


@pytest.mark.slow  # W&B's service process and a run that imports wandb: 10-15 s on 2 cores
def test_wandb_offline_run_holds_the_same_series(corpus_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    output = tmp_path / "run"
    env = tracker_env(WANDB_MODE="offline", WANDB_PROJECT="bertkit-test", WANDB_SILENT="true")
    args = pretrain_command(corpus_dir, output, *sets(**{"train.steps": 6, "train.eval_every": 3}),
                            "--report-to", "wandb")  # fmt: skip
    result = run(args, env, tmp_path)
    assert "tracking failed" not in result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    run_record, history, config, logged_summary = read_wandb_offline(output)
    assert run_record["id"] == json.loads((output / "tracking.json").read_text())["wandb"]["run_id"]
    assert run_record["name"] == "run" and "command:pretrain" in run_record["tags"]

    got: dict[str, list[tuple[int, float]]] = {}
    for row in history:
        for key, value in row.items():
            if not key.startswith("_"):
                got.setdefault(key, []).append((row["_step"], value))
    expected = expected_series(output)
    assert set(got) == set(expected) | {"peak_memory_mib"}
    for key, points in expected.items():
        assert [s for s, _ in got[key]] == [s for s, _ in points], key
        if key not in WALL_CLOCK:
            assert [v for _, v in got[key]] == pytest.approx([v for _, v in points], rel=1e-6), key
    recipe = recipe_params(output)
    assert {key: config[key] for key in recipe} == recipe  # the resolved recipe, by dotted keys
    assert config["bertkit.version"] and "input.corpus" in config
    assert logged_summary["summary/steps"] == summary["steps"] == 6
    assert logged_summary["summary/eval/mlm_loss"] == pytest.approx(summary["eval"]["mlm_loss"])


def test_sqlite_store_without_a_server_holds_one_run_of_the_recipe(
    corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """`sqlite:///` and no server, in-process: the run's parameters are the resolved recipe, its series the
    rows of metrics.jsonl, its summary artifact the --json result; run name and experiment from the recipe."""
    from cli_helpers import run_json
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'store.db'}"
    for name in [k for k in os.environ if k.startswith("MLFLOW_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)  # MLflow keeps a server-less store's artifacts under ./mlruns
    output = tmp_path / "run"
    summary = run_json("pretrain", "-r", "bert-tiny", "-c", str(corpus_dir), "-o", str(output),
                       *sets(**{"train.steps": 4, "train.eval_every": 2, "track.experiment": "tiny",
                                "track.run_name": "first-try"}),
                       "--report-to", "mlflow")  # fmt: skip
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert run.info.run_name == "first-try" and run.info.status == "FINISHED"
    assert_matches_metrics_file(client, run.info.run_id, output, steps=4)
    assert {k: v for k, v in run.data.params.items() if not k.startswith(("bertkit.", "input."))} == recipe_params(
        output
    )
    logged = json.loads(Path(client.download_artifacts(run.info.run_id, "summary.json", str(tmp_path))).read_text())
    assert logged == summary
    assert "model" not in {a.path for a in client.list_artifacts(run.info.run_id)}  # never by default


def test_a_tracker_that_is_not_installed_is_one_line_before_any_work(
    corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from cli_helpers import run_error

    from bertkit.engine import tracking

    missing = SimpleNamespace(util=SimpleNamespace(find_spec=lambda name: None))
    monkeypatch.setattr(tracking, "importlib", missing)  # as if wandb were not installed
    output = tmp_path / "run"
    line = run_error("pretrain", "-r", "bert-tiny", "-c", str(corpus_dir), "-o", str(output), "--report-to", "wandb")
    assert 'pip install "bertkit[wandb]"' in line
    assert not output.exists()


@pytest.mark.parametrize(
    ("value", "needle"),
    [("comet", "track.report_to"), ("mlflow,neptune", "track.report_to")],
)
def test_an_unknown_tracker_is_one_line(value: str, needle: str, corpus_dir: Path, tmp_path: Path) -> None:
    from cli_helpers import run_error

    line = run_error("pretrain", "-r", "bert-tiny", "-c", str(corpus_dir), "-o", str(tmp_path / "x"),
                     "--report-to", value)  # fmt: skip
    assert needle in line and "tensorboard" in line


@pytest.mark.parametrize("ask", [["--report-to", "tensorboard"], ["--set", "engine.tensorboard=true"]])
def test_tensorboard_not_installed_is_one_line(
    ask: list[str], corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Event files asked for without the tensorboard package: the same one line as MLflow's and W&B's, before
    any work, rather than a run that silently logs nothing."""
    from types import SimpleNamespace

    from cli_helpers import run_error

    from bertkit.engine import tracking

    missing = SimpleNamespace(util=SimpleNamespace(find_spec=lambda name: None))
    monkeypatch.setattr(tracking, "importlib", missing)  # as if tensorboard were not installed
    output = tmp_path / "run"
    line = run_error("pretrain", "-r", "bert-tiny", "-c", str(corpus_dir), "-o", str(output), *ask)
    assert 'needs the tensorboard package' in line and 'pip install "bertkit[tensorboard]"' in line, line
    assert not output.exists()


def test_report_to_tensorboard_is_the_engines_tensorboard() -> None:
    from bertkit.config.recipe import load_recipe

    recipe = load_recipe("bert-tiny", ["track.report_to=tensorboard, mlflow,mlflow"], kind="pretrain")
    assert recipe.track.report_to == ["tensorboard", "mlflow"] and recipe.engine.tensorboard
    assert not load_recipe("bert-tiny", [], kind="pretrain").engine.tensorboard  # off by default


def test_report_to_tensorboard_holds_the_series_of_metrics_jsonl(
    corpus_dir: Path, tmp_path: Path, one_thread: None
) -> None:
    """`pretrain --report-to tensorboard`, in-process: TensorBoard's reader finds every figure of metrics.jsonl at
    its step, evaluations included, as the other trackers log them (each key once per step)."""
    from cli_helpers import run_json
    from tensorboard_reader import tensorboard_series

    output = tmp_path / "run"
    run_json("pretrain", "-r", "bert-tiny", "-c", str(corpus_dir), "-o", str(output),
             *sets(**{"train.steps": 4, "train.eval_every": 2}), "--report-to", "tensorboard")  # fmt: skip
    expected = expected_series(output)
    assert {"loss", "mlm_acc", "eval_mlm_acc", "lr"} <= set(expected)
    got = tensorboard_series(output)
    assert set(got) == set(expected)
    for key, points in expected.items():
        assert [step for step, _ in got[key]] == [step for step, _ in points], key
        assert [value for _, value in got[key]] == pytest.approx([value for _, value in points], rel=1e-6), key


@pytest.mark.slow  # a teacher fine-tuned, then compress's augmentation, distillation and baseline: about a minute
def test_compress_logs_each_stage_as_a_run_nested_under_one_parent(
    pretrained_run: Path, sentiment_csv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    from cli_helpers import run_json, split_reviews
    from mlflow.tracking import MlflowClient

    split = split_reviews(sentiment_csv, tmp_path, 400)
    teacher = tmp_path / "teacher"
    run_json("finetune", "--model", str(pretrained_run), "--train", str(split["train"]), "--eval",
             str(split["eval"]), "-o", str(teacher), "-r", "finetune-tiny", "--set", "train.epochs=1",
             "--set", "train.batch_size=16")  # fmt: skip
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    for name in [k for k in os.environ if k.startswith("MLFLOW_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "compress")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "small"
    summary = run_json("compress", "--teacher", str(teacher), "--train", str(split["train"]), "--eval",
                       str(split["eval"]), "--layers", "1", "--copies", "1", "-o", str(out), "--report-to", "mlflow",
                       "--set", "distill.intermediate_for_copies=true", "--set", "distill.prediction.epochs=1",
                       "--set", "train.batch_size=16", "--baseline-set", "train.epochs=1")  # fmt: skip
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("compress").experiment_id])
    by_name = {run.info.run_name: run for run in runs}
    assert set(by_name) == {"small", "distill", "baseline"}
    parent = by_name["small"]
    assert parent.data.tags["bertkit.command"] == "compress" and "mlflow.parentRunId" not in parent.data.tags
    for stage in ("distill", "baseline"):
        assert by_name[stage].data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert by_name[stage].info.status == "FINISHED"
    # The distillation's two phases log under their own names; the baseline's rows as they are.
    distill_keys = set(by_name["distill"].data.metrics)
    assert {"intermediate/loss", "prediction/loss"} <= distill_keys
    assert "loss" in by_name["baseline"].data.metrics
    logged = json.loads(Path(client.download_artifacts(parent.info.run_id, "summary.json", str(tmp_path))).read_text())
    assert logged == summary and parent.info.status == "FINISHED"
