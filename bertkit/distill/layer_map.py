"""Which teacher layer each student layer learns from (TinyBERT), or is initialised from (DistilBERT).

Two numberings, kept apart on purpose:
- a layer MAP uses layer numbers, 1-based, with 0 the embedding layer: it indexes
  `LayerCapture.hidden_states` directly (its entry 0 is the embeddings output), and `attention_scores`
  as number − 1;
- an INIT selection uses the 0-based indices of `encoder.layers.{i}` in the state dict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bertkit.config.schema import ModelConfig
from bertkit.errors import BertkitError


def _check_depths(student_layers: int, teacher_layers: int) -> None:
    if student_layers > teacher_layers:
        raise BertkitError(
            f"the student has {student_layers} layers but the teacher only {teacher_layers}; "
            f"give the student at most {teacher_layers} layers (model.num_layers)"
        )


def uniform_layer_map(student_layers: int, teacher_layers: int) -> list[int]:
    """TinyBERT's g(m) = m · L_T / L_S for the student layers m = 1..L_S (teacher layer numbers, 1-based).

    g(0) = 0 (embeddings to embeddings) is implied and not listed. When L_S does not divide L_T the
    product is rounded down, which keeps the map increasing and still ends at g(L_S) = L_T.
    """
    _check_depths(student_layers, teacher_layers)
    return [m * teacher_layers // student_layers for m in range(1, student_layers + 1)]


def validate_layer_map(layer_map: Sequence[int], student_layers: int, teacher_layers: int) -> list[int]:
    """Check a user's `distill.layer_map`: one teacher layer number (1..L_T) per student layer, increasing."""
    example = uniform_layer_map(student_layers, teacher_layers) if student_layers <= teacher_layers else None
    hint = f", e.g. distill.layer_map=[{','.join(map(str, example))}]" if example else ""
    entries = list(layer_map)
    if len(entries) != student_layers:
        raise BertkitError(
            f"distill.layer_map has {len(entries)} entries but the student has {student_layers} layers; "
            f"give one teacher layer (1..{teacher_layers}) per student layer{hint}"
        )
    for m, layer in enumerate(entries, 1):
        if isinstance(layer, bool) or not isinstance(layer, int) or not 1 <= layer <= teacher_layers:
            raise BertkitError(
                f"distill.layer_map entry {m} is {layer!r}; teacher layers are numbered 1..{teacher_layers} "
                f"(the embedding layer 0 is always mapped to 0){hint}"
            )
    for m in range(1, len(entries)):
        if entries[m] <= entries[m - 1]:
            raise BertkitError(
                f"distill.layer_map must increase but entry {m + 1} ({entries[m]}) follows {entries[m - 1]}; "
                f"list the teacher layers in order{hint}"
            )
    return entries


def resolve_layer_map(layer_map: Sequence[int] | None, student_layers: int, teacher_layers: int) -> list[int]:
    """The user's map, checked, or TinyBERT's uniform one when none is given."""
    if layer_map is None:
        return uniform_layer_map(student_layers, teacher_layers)
    return validate_layer_map(layer_map, student_layers, teacher_layers)


def distilbert_init_layers(student_layers: int, teacher_layers: int) -> list[int]:
    """0-based teacher layers a DistilBERT student is initialised from: spread evenly, first and last kept.

    Layer i takes round(i · (L_T − 1) / (L_S − 1)), halves rounded up: for 12 → 6 that is the reference's
    0, 2, 4, 7, 9, 11; for 24 → 12 it is 0, 2, 4, 6, 8, 10, 13, 15, 17, 19, 21, 23; for 12 → 4 it is
    0, 4, 7, 11. The spacing is at least 1, so the layers are distinct. A 1-layer student takes layer 0.
    """
    _check_depths(student_layers, teacher_layers)
    if student_layers == 1:
        return [0]
    span = teacher_layers - 1
    # Integer arithmetic: floor(i·span/(L_S−1) + 1/2), with no floating-point ties to get wrong.
    return [(2 * i * span + student_layers - 1) // (2 * (student_layers - 1)) for i in range(student_layers)]


def check_windowed_attention(
    student: ModelConfig, teacher: ModelConfig, weights: Mapping[str, float], layer_map: Sequence[int] | None
) -> None:
    """Refuse an attention loss that would read a ModernBERT sliding-window layer.

    TinyBERT's score MSE compares QK^T over every pair of tokens, and MiniLM's attention KL a softmax over every
    key; in a sliding-window layer the model never uses the pairs outside its window, so either loss would push
    the student to match numbers that mean nothing to the teacher (or constrain ones the student never reads).
    Rather than re-define the losses on the window, they are allowed on global layers only. MiniLM's value
    relation reads no attention pattern and is always allowed. `weights`: term -> alpha, as the objective's."""
    compared: list[tuple[str, str, ModelConfig, int]] = []
    if weights.get("attention", 0) > 0:
        compared += [("attention", "student", student, i) for i in range(student.num_layers)]
        compared += [("attention", "teacher", teacher, g - 1) for g in layer_map or ()]
    if weights.get("attention_kl", 0) > 0:
        compared += [("attention_kl", "student", student, student.num_layers - 1)]
        compared += [("attention_kl", "teacher", teacher, teacher.num_layers - 1)]
    for term, who, cfg, index in compared:
        if not cfg.is_global_layer(index):
            raise BertkitError(
                f"distill.alpha_{term} compares attention over every pair of tokens, but the {who}'s layer "
                f"{index + 1} is a ModernBERT sliding-window layer (each token sees {cfg.local_attention} around it), "
                f"whose scores outside the window mean nothing; set --set distill.alpha_{term}=0, or compare global "
                f"layers only (every {cfg.global_attn_every_n_layers}th from layer 1)"
            )
