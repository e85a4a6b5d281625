"""What both kinds of `bertkit compress` share (a classifier's, bertkit/pipelines/compress.py; a bi-encoder's,
compress_embeddings.py): the student as a copy of N of the teacher's layers, and how the table times inference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError

INFER_BATCH, INFER_MAX_LEN, INFER_ROUNDS = 32, 128, 3


def check_layers(layers: int, depth: int) -> None:
    if not 1 <= layers < depth:
        raise BertkitError(f"--layers must be between 1 and {depth - 1} (the teacher has {depth} layers), not {layers}")


def copy_layers(teacher: Any, layers: int, out: Path) -> None:
    """A student of `layers` layers copied from the teacher (embeddings, DistilBERT's spread of layers, final
    norm and pooler), saved as a model directory that records which layers it was copied from, so that
    TinyBERT's layer map follows the copy."""
    from bertkit.distill.layer_map import distilbert_init_layers
    from bertkit.distill.student import DistillStudent, init_from_teacher
    from bertkit.modelio.modeldir import save_model_dir

    depth = teacher.config.num_layers
    check_layers(layers, depth)
    chosen = distilbert_init_layers(layers, depth)
    cfg = teacher.config.model_copy(update={"num_layers": layers})
    student = DistillStudent(cfg)
    init_from_teacher(student, teacher.state_dict(), teacher.config, chosen)
    save_model_dir(out / "model", student.kept_module(), cfg, "pretraining", teacher.tokenizer,
                   {"copied_layers": chosen, "distilled_from": teacher.source, "method": "tinybert"})  # fmt: skip


def relative_to_teacher(rows: list[dict[str, Any]], speed: str, score: str) -> None:
    """Each row's `speedup` (its `speed` over the teacher's, the first row) and `percent_of_teacher` (its `score` as a
    share of the teacher's; None when the teacher scores 0), in place."""
    reference = rows[0]
    for row in rows:
        row["speedup"] = round(row[speed] / reference[speed], 2)
        row["percent_of_teacher"] = round(100 * row[score] / reference[score], 1) if reference[score] else None
