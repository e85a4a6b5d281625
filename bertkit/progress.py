"""Progress display on stderr: a rich bar with rate and ETA, or nothing with --quiet.

Progress goes to stderr so that stdout stays clean for `--json` and shell pipelines.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

stderr_console = Console(stderr=True)


class Tracker:
    """One progress bar; a no-op when quiet, so library code never checks flags."""

    def __init__(self, description: str, total: float | None, quiet: bool = False, unit: str = "it") -> None:
        self._progress: Progress | None = None
        if quiet:
            return
        columns: list[ProgressColumn | str] = [TextColumn("[bold]{task.description}"), BarColumn()]
        if unit == "bytes":
            columns += [TaskProgressColumn(), TransferSpeedColumn()]
        else:
            columns += [MofNCompleteColumn(), TextColumn("[cyan]{task.fields[rate]}")]
        columns += [TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[info]}")]
        self.unit = unit
        self._progress = Progress(*columns, console=stderr_console)
        self._task = self._progress.add_task(description, total=total, info="", rate="")
        # A terminal gets the live bar. A log file or pipe (which cannot redraw) gets the bar's final state once the
        # work is done, and nothing when it failed: rich's display would still end with a blank line there, before
        # the error line.
        self._live = stderr_console.is_terminal
        if self._live:
            self._progress.start()

    def advance(self, amount: float = 1, info: str | None = None) -> None:
        if self._progress is None:
            return
        self._progress.update(self._task, advance=amount)
        task = self._progress.tasks[0]
        fields = {"rate": f"{task.speed:.2f} {self.unit}/s" if task.speed else ""}
        if info is not None:
            fields["info"] = info
        self._progress.update(self._task, **fields)

    def set_total(self, total: float) -> None:
        """For work whose size is known only once it starts (a task learns its share of the input from the plan)."""
        if self._progress is not None:
            self._progress.update(self._task, total=total)

    def close(self, failed: bool = False) -> None:
        if self._progress is not None:
            if not self._live:
                if not failed:
                    stderr_console.print(self._progress.get_renderable())
            else:
                if failed:
                    # Erase the bar: the error line alone should be what the user sees.
                    self._progress.live.transient = True
                self._progress.stop()
            self._progress = None

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self.close(failed=exc_type is not None)
