"""MLflow: one run per job, through `MlflowClient`, which reads MLflow's own settings from the environment
(MLFLOW_TRACKING_URI, MLFLOW_TRACKING_USERNAME/PASSWORD/TOKEN, MLFLOW_HTTP_REQUEST_*, ...).

The client is used rather than `mlflow.start_run`: the fluent API keeps a process-wide active run and ends it
at exit as FINISHED, whereas a job killed and resumed must leave its run open for the next attempt.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bertkit.engine.trackers.base import RunInfo

_PARAMS_PER_CALL, _METRICS_PER_CALL = 100, 1000  # MLflow's log_batch limits
_PARAM_CHARS = 6000  # MLflow's limit on one parameter's value


class MlflowBackend:
    name = "mlflow"

    def __init__(self, info: RunInfo, saved: dict[str, str] | None) -> None:
        import mlflow
        from mlflow.tracking import MlflowClient

        self.uri = mlflow.get_tracking_uri()
        self.client = MlflowClient(self.uri)
        self.last_step: dict[str, int] = {}  # metric -> the last step the run already holds (a resumed job)
        self.run_id = self._reopen(saved) if saved else None
        if self.run_id is None:
            self.run_id = self._create(info)
            self._log_params(info.params)
        else:
            # The recipe is logged once; a resumed job's command line goes to a tag (tags can change).
            self.client.set_tag(self.run_id, "bertkit.resume_command_line", info.params["bertkit.command_line"])
        self.log_model = info.log_model

    def ids(self) -> dict[str, str]:
        return {"run_id": str(self.run_id), "tracking_uri": self.uri}

    def _reopen(self, saved: dict[str, str]) -> str | None:
        """The run this directory's job logged to, if it lives where MLflow points now; it goes on logging."""
        if saved.get("tracking_uri") != self.uri or not saved.get("run_id"):
            return None
        run = self.client.get_run(saved["run_id"])
        for key in run.data.metrics:
            history = self.client.get_metric_history(run.info.run_id, key)
            self.last_step[key] = max((metric.step for metric in history), default=-1)
        self.client.update_run(run.info.run_id, status="RUNNING")
        return run.info.run_id

    def _create(self, info: RunInfo) -> str:
        experiment_id = self._experiment(info.experiment)
        tags = {f"bertkit.{key}": value for key, value in info.tags.items()}
        if "mlflow" in info.parent:
            tags["mlflow.parentRunId"] = info.parent["mlflow"]
        return self.client.create_run(experiment_id, tags=tags, run_name=info.name).info.run_id

    def _experiment(self, name: str | None) -> str:
        """track.experiment, else MLflow's own choice (MLFLOW_EXPERIMENT_NAME / _ID), else its default one."""
        if name is None:
            if os.environ.get("MLFLOW_EXPERIMENT_ID"):
                return os.environ["MLFLOW_EXPERIMENT_ID"]
            name = os.environ.get("MLFLOW_EXPERIMENT_NAME")
            if not name:
                return "0"  # MLflow's "Default" experiment
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        try:
            return self.client.create_experiment(name)
        except Exception:  # another job created it meanwhile
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def _log_params(self, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(key, value[:_PARAM_CHARS]) for key, value in params.items()]
        for start in range(0, len(items), _PARAMS_PER_CALL):
            self.client.log_batch(str(self.run_id), params=items[start : start + _PARAMS_PER_CALL])

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        # A step the run already holds was logged by the attempt that was killed after its checkpoint; the
        # resumed job computes the same values (exact resume), and logging them again would duplicate them.
        # MLflow's metric names cannot hold "@": retrieval's ndcg@10 is logged as ndcg_at_10.
        named = {k.replace("@", "_at_"): v for k, v in metrics.items()}
        fresh = [Metric(k, v, now, step) for k, v in named.items() if step > self.last_step.get(k, -1)]
        for start in range(0, len(fresh), _METRICS_PER_CALL):
            self.client.log_batch(str(self.run_id), metrics=fresh[start : start + _METRICS_PER_CALL])

    def finish(self, summary: dict[str, Any], model_dir: Path | None) -> None:
        run_id = str(self.run_id)
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "summary.json"
            path.write_text(json.dumps(summary, indent=2, default=str), "utf-8")
            self.client.log_artifact(run_id, str(path))
        if self.log_model and model_dir is not None and model_dir.is_dir():
            self.client.log_artifacts(run_id, str(model_dir), "model")
        self.client.set_terminated(run_id, "FINISHED")

    def abort(self, status: str) -> None:
        self.client.set_terminated(str(self.run_id), status)
