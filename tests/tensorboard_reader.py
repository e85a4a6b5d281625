"""TensorBoard's event files read back by TensorBoard's own reader, for the tests of `engine.tensorboard`.

Importable from every test directory because pytest puts this folder (it holds the root conftest.py) on sys.path.
"""

from __future__ import annotations

from pathlib import Path


def tensorboard_series(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag under RUN_DIR/tensorboard as (step, value) points, as TensorBoard shows them: through its
    EventAccumulator, which applies any purge an event file asks for, with nothing sampled away."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(event.step, event.value) for event in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
