"""A wider teacher's vectors brought to a narrower student's width, so the student can learn them by squared
distance (embedding distillation): each unit vector is projected onto the teacher's first principal directions,
computed once over the training texts' vectors, and made unit length again (sentence-transformers' distillation
example reduces its teacher with PCA the same way). The student then learns the directions along which the
teacher's vectors of these texts vary most; `variance_kept` says how much of their spread those directions hold."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from bertkit.errors import BertkitError


@dataclass(frozen=True)
class Projection:
    directions: torch.Tensor  # (student width, teacher width): the principal directions, orthonormal rows
    variance_kept: float  # the share of the vectors' variance along those directions

    def __call__(self, vectors: torch.Tensor) -> torch.Tensor:
        return F.normalize(vectors.float() @ self.directions.T, dim=-1)

    def report(self) -> dict[str, float | int]:
        width, source = self.directions.shape
        return {"from": source, "to": width, "variance_kept": round(self.variance_kept, 4)}


def principal_projection(vectors: torch.Tensor, width: int) -> Projection:
    """The first `width` principal directions of `vectors` (rows: one text each), as PCA finds them: the right
    singular vectors of the centred rows, largest first."""
    rows, source = vectors.shape
    if width > source:
        raise BertkitError(f"the teacher's vectors are {source} wide and the student's {width}: a projection only "
                           "narrows; learn the teacher's in-batch ranking instead (--set task.distill_loss=kl), which "
                           "any width can")  # fmt: skip
    if width > rows:
        raise BertkitError(f"projecting the teacher's {source}-wide vectors to the student's {width} needs at least "
                           f"{width} distinct training texts, and there are {rows}; add pairs, or learn the teacher's "
                           "in-batch ranking instead (--set task.distill_loss=kl)")  # fmt: skip
    centred = vectors.double() - vectors.double().mean(dim=0)
    _, singular, right = torch.linalg.svd(centred, full_matrices=False)
    variance = singular.pow(2)
    return Projection(right[:width].float().contiguous(), float(variance[:width].sum() / variance.sum()))
