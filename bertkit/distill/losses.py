"""Distillation losses of DistilBERT, TinyBERT and MiniLM: tensors in, a SUM over targets out.

The training loop normalises every loss as (sum over its targets) / (number of targets in the whole
global batch: all micro-steps and ranks), so a micro-batch with few targets weighs exactly as much as its
targets. Each loss therefore returns a sum, and has a count function that reads the batch alone (before
any forward pass). Per-target values are scaled so that sum / count is the mean the paper uses.

| loss | one target | count |
|---|---|---|
| `distilbert_soft_ce` | a masked position | `masked_position_count(mlm_positions)` |
| `cosine_loss` | a non-padding token | `token_count(attention_mask)` |
| `hidden_mse_loss` (TinyBERT embeddings, hidden states) | a non-padding token | `token_count` |
| `attention_score_mse_loss` (TinyBERT) | a valid (query, key) pair | `token_pair_count(attention_mask)` |
| `prediction_soft_ce` (TinyBERT) | a sequence | `sequence_count(input_ids)` |
| `attention_kl_loss`, `value_relation_kl_loss` (MiniLM) | a non-padding query token | `token_count` |

Every loss computes in float32 whatever the models' dtype: these are small sums of differences. Padding is
left out with `torch.where` rather than boolean indexing, so shapes stay static (no device-to-host sync).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

# ------------------------------------------------------------------------------------------------ counts


def masked_position_count(mlm_positions: torch.Tensor) -> torch.Tensor:
    """Masked positions in the batch: `mlm_positions` holds one flat index into B*T per masked token."""
    return torch.tensor(mlm_positions.numel(), device=mlm_positions.device)


def token_count(attention_mask: torch.Tensor) -> torch.Tensor:
    """Non-padding tokens: the ones of the (B, T) attention mask."""
    return attention_mask.bool().sum()


def token_pair_count(attention_mask: torch.Tensor) -> torch.Tensor:
    """(query, key) pairs where both tokens are non-padding: n_b² summed over the sequences."""
    lengths = attention_mask.bool().sum(dim=1)
    return (lengths * lengths).sum()


def sequence_count(input_ids: torch.Tensor) -> torch.Tensor:
    """Sequences in the batch (rows of `input_ids`)."""
    return torch.tensor(input_ids.shape[0], device=input_ids.device)


# The count of each loss from a batch dict, for the loop: keyed by the loss function's name.
TARGET_COUNTS: dict[str, Callable[[dict[str, torch.Tensor]], torch.Tensor]] = {
    "distilbert_soft_ce": lambda batch: masked_position_count(batch["mlm_positions"]),
    "cosine_loss": lambda batch: token_count(batch["attention_mask"]),
    "hidden_mse_loss": lambda batch: token_count(batch["attention_mask"]),
    "attention_score_mse_loss": lambda batch: token_pair_count(batch["attention_mask"]),
    "prediction_soft_ce": lambda batch: sequence_count(batch["input_ids"]),
    "attention_kl_loss": lambda batch: token_count(batch["attention_mask"]),
    "value_relation_kl_loss": lambda batch: token_count(batch["attention_mask"]),
}


def _same_shape(student: torch.Tensor, teacher: torch.Tensor, what: str) -> None:
    # A mismatch here is a bug in the caller (configs are checked before training), not a user error.
    if student.shape != teacher.shape:
        raise ValueError(f"{what}: student {tuple(student.shape)} and teacher {tuple(teacher.shape)} differ")


def _masked_sum(values: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    # where, not multiplication: whatever a padding position holds (even inf) cannot reach the sum.
    return torch.where(keep, values, torch.zeros((), dtype=values.dtype, device=values.device)).sum()


# --------------------------------------------------------------------------------------------- DistilBERT


def distilbert_soft_ce(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 2.0
) -> torch.Tensor:
    """Σ over masked positions of T² · KL(softmax(z_t/T) ‖ softmax(z_s/T)).

    One target = one masked position: the logits are (N, V), taken at `mlm_positions`. sum / count is
    DistilBERT's KLDivLoss(reduction="batchmean") · T². (Its reference code can also use every
    non-padding token; bertkit's sparse MLM head has logits only at the masked positions.)
    """
    _same_shape(student_logits, teacher_logits, "MLM logits")
    log_p_s = F.log_softmax(student_logits.float() / temperature, dim=-1)
    log_p_t = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    kl = (log_p_t.exp() * (log_p_t - log_p_s)).sum()
    return kl * temperature**2


def cosine_loss(
    student_hidden: torch.Tensor, teacher_hidden: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """Σ over non-padding tokens of 1 − cos(h_t, h_s), on (B, T, H) last hidden states of equal width.

    One target = one non-padding token; sum / count is DistilBERT's CosineEmbeddingLoss (target 1, mean).
    """
    _same_shape(student_hidden, teacher_hidden, "hidden states")
    cos = F.cosine_similarity(student_hidden.float(), teacher_hidden.float(), dim=-1, eps=1e-8)
    return _masked_sum(1.0 - cos, attention_mask.bool())


# ------------------------------------------------------------------------------------------------ TinyBERT


def _token_mse(student: torch.Tensor, teacher: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    _same_shape(student, teacher, "hidden states (after the projection)")
    return _masked_sum((student.float() - teacher.float()).pow(2).mean(dim=-1), valid)


def hidden_mse_loss(
    student_states: Sequence[torch.Tensor], teacher_states: Sequence[torch.Tensor], attention_mask: torch.Tensor
) -> torch.Tensor:
    """Σ over the mapped layers and non-padding tokens of the mean over hidden dims of (h_s·W − h_t)².

    Pass the student's states already projected to the teacher's width (DistillStudent does it), pairs
    in the same order. One target = one non-padding token; sum / count = Σ over layers of MSE(h_s W, h_t)
    on the non-padding tokens. TinyBERT's L_embd is this with the single pair (embeddings output);
    its L_hidn the same over the layer map. (The reference averages over padding too; bertkit does not
    distil padding.)
    """
    if len(student_states) != len(teacher_states):
        raise ValueError(f"{len(student_states)} student states for {len(teacher_states)} teacher states")
    valid = attention_mask.bool()
    total = torch.zeros((), device=attention_mask.device)
    for student, teacher in zip(student_states, teacher_states, strict=True):
        total = total + _token_mse(student, teacher, valid)
    return total


def attention_score_mse_loss(
    student_scores: Sequence[torch.Tensor], teacher_scores: Sequence[torch.Tensor], attention_mask: torch.Tensor
) -> torch.Tensor:
    """Σ over mapped layers and valid (query, key) pairs of the mean over heads of (S_s − S_t)².

    S = QKᵀ/√d_head before masking and softmax, (B, heads, T, T); teacher and student need the same
    number of heads. One target = one (query, key) pair with both tokens non-padding; sum / count = Σ
    over layers of the MSE over heads and valid pairs (TinyBERT's L_attn). The reference zeroes the masked
    (−10000) scores and averages over padding as well; here padding is left out in both query and key.
    """
    if len(student_scores) != len(teacher_scores):
        raise ValueError(f"{len(student_scores)} student layers for {len(teacher_scores)} teacher layers")
    valid = attention_mask.bool()
    pairs = valid[:, :, None] & valid[:, None, :]  # (B, T, T)
    total = torch.zeros((), device=attention_mask.device)
    for student, teacher in zip(student_scores, teacher_scores, strict=True):
        _same_shape(student, teacher, "attention scores (same number of heads needed)")
        per_pair = (student.float() - teacher.float()).pow(2).mean(dim=1)  # mean over heads: (B, T, T)
        total = total + _masked_sum(per_pair, pairs)
    return total


def prediction_soft_ce(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Σ over sequences of −Σ_c softmax(z_t/t)_c · log softmax(z_s/t)_c (TinyBERT's L_pred, t = 1).

    One target = one sequence (classification logits (B, C)); sum / count is the soft cross-entropy
    averaged over sequences. (The reference's `.mean()` also divides by the number of classes, a constant
    factor.) No t² factor: TinyBERT has none.
    """
    _same_shape(student_logits, teacher_logits, "classification logits")
    p_t = F.softmax(teacher_logits.float() / temperature, dim=-1)
    return -(p_t * F.log_softmax(student_logits.float() / temperature, dim=-1)).sum()


# -------------------------------------------------------------------------------------------------- MiniLM


def _relation_kl(student: torch.Tensor, teacher: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Σ over non-padding queries of the mean over heads of KL(softmax(teacher) ‖ softmax(student)),
    each softmax over the non-padding keys of the query's row; inputs are (B, heads, T, T) logits."""
    valid = attention_mask.bool()
    keys = valid[:, None, None, :]
    fill = torch.finfo(torch.float32).min
    log_s = student.float().masked_fill(~keys, fill).log_softmax(dim=-1)
    log_t = teacher.float().masked_fill(~keys, fill).log_softmax(dim=-1)
    # Padding keys have teacher probability exactly 0 and are excluded explicitly, so 0·log 0 is never formed.
    terms = torch.where(keys, log_t.exp() * (log_t - log_s), torch.zeros((), device=student.device))
    per_query = terms.sum(dim=-1).mean(dim=1)  # KL per (head, query), averaged over heads: (B, T)
    return _masked_sum(per_query, valid)


def attention_kl_loss(
    student_scores: torch.Tensor, teacher_scores: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """MiniLM's attention transfer on one layer pair (the last ones): KL(A_t ‖ A_s) per head and query.

    Takes the pre-softmax scores QKᵀ/√d_head, (B, heads, T, T), and re-applies the softmax over the
    non-padding keys (a log-softmax: exact and stable, where logs of the probabilities would not be).
    Teacher and student need the same number of heads (MiniLM v1); their widths may differ. One target =
    one non-padding query token; sum / count is the paper's 1/(A_h·|x|) Σ_a Σ_t KL.
    """
    _same_shape(student_scores, teacher_scores, "attention scores (MiniLM needs the same number of heads)")
    return _relation_kl(student_scores, teacher_scores, attention_mask)


def value_relation(values: torch.Tensor) -> torch.Tensor:
    """V Vᵀ/√d_head per head: (B, heads, T, head_dim) -> (B, heads, T, T) logits of MiniLM's VR."""
    return (values.float() @ values.float().transpose(-1, -2)) / math.sqrt(values.shape[-1])


def value_relation_kl_loss(
    student_values: torch.Tensor, teacher_values: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """MiniLM's value-relation transfer: KL(VR_t ‖ VR_s), VR = softmax(V Vᵀ/√d_head) over valid keys.

    Values are (B, heads, T, head_dim); head_dim may differ between teacher and student (each relation is
    T×T), the number of heads may not. One target = one non-padding query token, averaged over heads.
    """
    if student_values.shape[:3] != teacher_values.shape[:3]:
        raise ValueError(
            f"values: student {tuple(student_values.shape)} and teacher {tuple(teacher_values.shape)} "
            "differ in batch, heads or length (MiniLM needs the same number of heads)"
        )
    return _relation_kl(value_relation(student_values), value_relation(teacher_values), attention_mask)
