"""Extractive question answering (SQuAD v1.1 / v2.0): the answer is a span of the context.

- Files: SQuAD JSON (`data` -> `paragraphs` -> `context`, `qas` -> `question`, `id`, `answers` [{`text`,
  `answer_start`}], v2.0 `is_impossible`) and JSON lines (`question`, `context`, `answers` {`text`: [...],
  `answer_start`: [...]}, as Hugging Face datasets store SQuAD; an empty list is a question without answer).
- Answers: a training answer's `text` must be at `answer_start` in the context. SQuAD v1.1 dev has a few off
  by a character or two: the exact text is looked for within `MAX_SHIFT` characters and used where found;
  otherwise the question is an error (or, with skip_bad_rows, skipped and counted).
- Windows: `[CLS] question [SEP] context window [SEP]`. The question keeps at most `qa_question_tokens(max_len)`
  tokens; a long context is cut into windows of the room left that overlap by `doc_stride` tokens (as
  transformers' run_qa.py; by default a third of the window, see bertkit.config.schema.qa_doc_stride). The
  answer's first and last tokens come from the tokenizer's character offsets; a window that does not hold the
  whole answer (and every window of an unanswerable question) points at [CLS] (position 0) for both start and end.
- Head: one linear layer (hidden -> 2: start and end logits) on every token, Hugging Face's `qa_outputs`.
  Loss: cross-entropy of the start and of the end position, (start + end) / 2; a target is a window.
- Post-processing: the `n_best` top start and end logits of every window of a question, spans inside the
  context of at most `max_answer_length` tokens, scored start + end logit; the best over all windows, mapped
  back to the context text by the offsets. v2.0 (when the training data has unanswerable questions): the
  null score ([CLS] start + end, the lowest over windows) beats the best span by more than `null_threshold`
  -> the empty answer.
- Metrics: exact match and F1 in percent (0-100, as the official SQuAD scripts report them) after SQuAD's
  normalisation (lower case, no punctuation, no articles a/an/the, single spaces), the maximum over the
  gold answers; with unanswerable questions also HasAns_* and NoAns_* scores.
"""

from __future__ import annotations

import collections
import json
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config.schema import qa_doc_stride, qa_question_tokens
from bertkit.corpus.loader import EpochSampler, SampledBatches, pad_batch
from bertkit.errors import BertkitError
from bertkit.models.bert import BertEncoder
from bertkit.models.layers import init_weights
from bertkit.models.pretraining import build_task_head
from bertkit.objectives.base import Counts, Metrics, Objective, share
from bertkit.tokenizers.base import Tokenizer

MAX_SHIFT = 3  # characters an answer_start may be off by (SQuAD v1.1 dev has a few off by one or two)


# ------------------------------------------------------------------------------------------------ reading


@dataclass
class QAExample:
    id: str
    question: str
    context: str
    answers: list[str]  # gold texts (all of them; empty for an unanswerable question)
    start: int  # the first answer's character start, -1 without an answer
    group: str  # the article (SQuAD title) or, without one, the context: eval splits keep groups whole

    @property
    def impossible(self) -> bool:
        return not self.answers


@dataclass
class QAData:
    path: Path
    examples: list[QAExample] = field(default_factory=list)
    rows_read: int = 0
    skipped: int = 0
    skipped_rows: list[str] = field(default_factory=list)
    shifted: int = 0  # answers found a few characters from their answer_start

    def __len__(self) -> int:
        return len(self.examples)

    @property
    def has_impossible(self) -> bool:
        return any(e.impossible for e in self.examples)


def locate_answer(context: str, text: str, start: int) -> int | None:
    """Where `text` really starts: at `start`, else the nearest exact occurrence within MAX_SHIFT characters."""
    for shift in sorted(range(-MAX_SHIFT, MAX_SHIFT + 1), key=abs):
        at = start + shift
        if at >= 0 and context.startswith(text, at):
            return at
    return None


def _load_json(path: Path) -> Any:
    from bertkit.inputs.sources import open_binary

    if not path.exists():
        raise BertkitError(f"task file not found: {path}")
    if path.is_dir():
        raise BertkitError(f"{path} is a directory; question answering reads a SQuAD JSON or JSON lines file")
    try:
        with open_binary(path) as handle:
            raw = handle.read()
    except (OSError, EOFError) as err:
        raise BertkitError(f"cannot read {path}: {err}") from None
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        raise BertkitError(f"{path} is not UTF-8 text; re-encode it as UTF-8") from None
    if not text.strip():
        raise BertkitError(f"{path} is empty; give SQuAD JSON or JSON lines of question, context and answers")
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError:
        return text  # JSON lines (or broken JSON: reported line by line)
    if isinstance(loaded, dict) and "data" not in loaded and ("question" in loaded or "context" in loaded):
        return text  # JSON lines holding one question
    return loaded


def read_qa_file(path: Path, skip_bad_rows: bool = False, need_answers: bool = True) -> QAData:
    """Questions of a SQuAD JSON or JSON lines file. `need_answers`: every question has answers (or is marked
    unanswerable) and a training answer must sit at its answer_start (give or take MAX_SHIFT characters)."""
    path = Path(path)
    loaded = _load_json(path)
    data = QAData(path)
    if isinstance(loaded, dict):
        if not isinstance(loaded.get("data"), list):
            raise BertkitError(
                f"{path} is JSON without a 'data' list of articles; give SQuAD JSON (data -> paragraphs -> qas) "
                "or JSON lines with question, context and answers"
            )
        _read_squad(path, loaded["data"], data, skip_bad_rows, need_answers)
    else:
        from bertkit.inputs.sources import split_lines

        lines = split_lines(loaded) if isinstance(loaded, str) else [json.dumps(loaded)]
        _read_jsonl(path, lines, data, skip_bad_rows, need_answers)
    if not data.examples:
        raise BertkitError(f"{path} holds no questions (read {data.rows_read}, skipped {data.skipped})")
    return data


def _field(path: Path, where: str, row: dict, name: str, kind: type = str) -> Any:
    value = row.get(name)
    if not isinstance(value, kind) or (kind is str and not value.strip()):
        what = "missing" if value is None else f"a {type(value).__name__}" if not isinstance(value, kind) else "empty"
        raise BertkitError(f"{path} {where}: '{name}' is {what}; every question needs a {name} ({kind.__name__})")
    return value


def _add(
    path: Path, data: QAData, where: str, qid: str, question: str, context: str, answers: list[tuple[Any, Any]],
    impossible: bool, group: str, skip: bool, need_answers: bool,
) -> None:  # fmt: skip
    data.rows_read += 1
    texts = [t for t, _ in answers]
    if any(not isinstance(t, str) for t in texts):
        raise BertkitError(f"{path} {where} (question {qid}): answer texts must be strings; fix the answers")
    start = -1
    problem = None
    if not impossible and need_answers:
        if not answers:
            problem = "has no answers and is not marked is_impossible; give its answers (or mark it unanswerable)"
        else:
            text, at = answers[0]
            if not isinstance(at, int) or not text.strip():
                problem = f"has an answer {text!r} without a valid answer_start ({at!r}); give the character offset"
            else:
                found = locate_answer(context, text, at)
                if found is None:
                    problem = (
                        f"answer {text[:60]!r} is not at answer_start {at} of its context (nor within {MAX_SHIFT} "
                        "characters of it); fix answer_start or the text, or pass --skip-bad-rows to skip them"
                    )
                else:
                    data.shifted += found != at
                    start = found
    if problem is not None:
        if skip:
            data.skipped += 1
            if len(data.skipped_rows) < 3:
                data.skipped_rows.append(f"{where} (question {qid})")
            return
        raise BertkitError(f"{path} {where}: question {qid} {problem}")
    gold = [] if impossible else [t for t in texts if t.strip()]
    data.examples.append(QAExample(qid, question, context, gold, start if gold else -1, group))


def _read_squad(path: Path, articles: list, data: QAData, skip: bool, need_answers: bool) -> None:
    for a, article in enumerate(articles):
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            raise BertkitError(f"{path}: article {a} has no 'paragraphs' list; is this SQuAD JSON?")
        title = str(article.get("title", f"article {a}"))
        for p, paragraph in enumerate(article["paragraphs"]):
            where = f"article {a} paragraph {p}"
            if not isinstance(paragraph, dict):
                raise BertkitError(f"{path} {where} is not an object with context and qas; is this SQuAD JSON?")
            context = _field(path, where, paragraph, "context")
            if not isinstance(paragraph.get("qas"), list):
                raise BertkitError(f"{path} {where}: no 'qas' list of questions; is this SQuAD JSON?")
            for q, qa in enumerate(paragraph["qas"]):
                if not isinstance(qa, dict):
                    raise BertkitError(f"{path} {where} question {q} is not an object; fix it")
                qid = str(qa.get("id", f"{a}-{p}-{q}"))
                question = _field(path, f"{where} (question {qid})", qa, "question")
                answers = qa.get("answers", [] if not need_answers else None)
                if not isinstance(answers, list) or not all(isinstance(x, dict) for x in answers):
                    raise BertkitError(
                        f"{path} {where}: question {qid} has no 'answers' list; give "
                        '[{"text": ..., "answer_start": ...}] (an empty list with "is_impossible": true)'
                    )
                pairs = [(x.get("text"), x.get("answer_start")) for x in answers]
                impossible = bool(qa.get("is_impossible", False)) or (not need_answers and not pairs)
                _add(path, data, where, qid, question, context, pairs, impossible, title, skip, need_answers)


def _read_jsonl(path: Path, lines: list[str], data: QAData, skip: bool, need_answers: bool) -> None:
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise BertkitError(
                f"{path} {where} is not valid JSON ({err.msg}); give SQuAD JSON or JSON lines of question, "
                "context and answers"
            ) from None
        if not isinstance(row, dict):
            raise BertkitError(
                f"{path} {where} is a JSON {type(row).__name__}, not an object with question and context"
            )
        qid = str(row.get("id", number))
        question = _field(path, f"{where} (question {qid})", row, "question")
        context = _field(path, f"{where} (question {qid})", row, "context")
        answers = row.get("answers")
        if answers is None and not need_answers:
            answers = {"text": [], "answer_start": []}
        if (
            not isinstance(answers, dict)
            or not isinstance(answers.get("text"), list)
            or not isinstance(answers.get("answer_start", []), list)
        ):
            raise BertkitError(
                f'{path} {where}: question {qid} needs \'answers\' as {{"text": [...], "answer_start": [...]}} '
                "(empty lists for an unanswerable question); fix the line"
            )
        starts = answers.get("answer_start", [])
        texts = answers["text"]
        pairs = [(t, starts[i] if i < len(starts) else None) for i, t in enumerate(texts)]
        impossible = bool(row.get("is_impossible", False)) or not texts
        group = str(row.get("title") or context)
        _add(path, data, where, qid, question, context, pairs, impossible, group, skip, need_answers)


def split_by_group(data: QAData, eval_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Train / eval question indices with whole articles (or contexts) on one side: eval contexts are unseen."""
    from bertkit.corpus.loader import split_indices

    groups = list(dict.fromkeys(e.group for e in data.examples))
    train_g, eval_g = split_indices(len(groups), eval_fraction, seed)
    held = {groups[int(i)] for i in eval_g}
    train = [i for i, e in enumerate(data.examples) if e.group not in held]
    evals = [i for i, e in enumerate(data.examples) if e.group in held]
    return train, evals


def read_qa_split(
    train_file: Path, eval_file: Path | None, skip_bad_rows: bool, eval_fraction: float, seed: int
) -> tuple[QAData, QAData | None, list[QAExample], list[QAExample]]:
    """(what was read of --train, of --eval, the training and the evaluation questions): --eval's questions,
    or a held-out share of --train's articles (whole articles on one side, `split_by_group`)."""
    train_read = read_qa_file(train_file, skip_bad_rows)
    eval_read = read_qa_file(eval_file, skip_bad_rows) if eval_file is not None else None
    if eval_read is not None:
        train_examples, eval_examples = train_read.examples, eval_read.examples
    else:
        train_idx, eval_idx = split_by_group(train_read, eval_fraction, seed)
        train_examples = [train_read.examples[i] for i in train_idx]
        eval_examples = [train_read.examples[i] for i in eval_idx]
    if not train_examples:
        raise BertkitError(f"{train_file}: every article went to evaluation; lower task.eval_fraction or give --eval")
    return train_read, eval_read, train_examples, eval_examples


# ------------------------------------------------------------------------------------------------ encoding


@dataclass
class QAFeatures:
    """The windows of a list of examples."""

    input_ids: list[np.ndarray] = field(default_factory=list)
    token_types: list[np.ndarray] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)  # target token positions (0: [CLS], no answer here)
    ends: list[int] = field(default_factory=list)
    example: list[int] = field(default_factory=list)  # the example each window belongs to
    offset: list[int] = field(default_factory=list)  # position of the window's first context token
    offsets: list[np.ndarray] = field(default_factory=list)  # (n, 2) character spans of its context tokens
    unreachable: int = 0  # answers no window holds whole (longer than a window)

    def __len__(self) -> int:
        return len(self.input_ids)


def answer_tokens(offsets: np.ndarray, start: int, end: int) -> tuple[int, int] | None:
    """First and last context token (indices into `offsets`) covering characters [start, end)."""
    if len(offsets) == 0:
        return None
    first = np.nonzero(offsets[:, 1] > start)[0]
    last = np.nonzero(offsets[:, 0] < end)[0]
    if len(first) == 0 or len(last) == 0 or first[0] > last[-1]:
        return None
    return int(first[0]), int(last[-1])


def encode_qa(
    examples: list[QAExample], tokenizer: Tokenizer, max_len: int, doc_stride: int | None, types: bool = True
) -> QAFeatures:
    """Windows `[CLS] question [SEP] context part [SEP]` of every example with start/end targets; `doc_stride`
    None derives it from `max_len` (qa_doc_stride)."""
    q_cap = qa_question_tokens(max_len)
    doc_stride = qa_doc_stride(max_len, doc_stride)
    questions = tokenizer.backend.encode_batch([e.question for e in examples], add_special_tokens=False)
    contexts = tokenizer.backend.encode_batch([e.context for e in examples], add_special_tokens=False)
    out = QAFeatures()
    for n, (example, q_enc, c_enc) in enumerate(zip(examples, questions, contexts, strict=True)):
        q_ids = q_enc.ids[:q_cap]
        room = max_len - 3 - len(q_ids)
        if doc_stride >= room:
            raise BertkitError(
                f"task.doc_stride ({doc_stride}) must be less than the context room of a window ({room} tokens: "
                f"task.max_seq_len {max_len} less the question and 3 special tokens); lower task.doc_stride or "
                "raise task.max_seq_len (e.g. 384 with doc_stride 128), or leave task.doc_stride unset to derive it"
            )
        c_ids = np.asarray(c_enc.ids, dtype=np.int64)
        offsets = np.asarray(c_enc.offsets, dtype=np.int64).reshape(-1, 2)
        target = None
        if not example.impossible and example.start >= 0:
            target = answer_tokens(offsets, example.start, example.start + len(example.answers[0]))
        head = [tokenizer.cls_id, *q_ids, tokenizer.sep_id]
        begin, reached = 0, target is None
        while True:
            stop = min(begin + room, len(c_ids))
            ids = np.asarray([*head, *c_ids[begin:stop], tokenizer.sep_id], dtype=np.int64)
            s = e = 0
            if target is not None and begin <= target[0] and target[1] < stop:
                s, e = target[0] - begin + len(head), target[1] - begin + len(head)
                reached = True
            out.input_ids.append(ids)
            out.token_types.append(
                np.asarray([0] * len(head) + [1] * (len(ids) - len(head)), dtype=np.int64)
                if types else np.zeros(len(ids), dtype=np.int64)
            )  # fmt: skip
            out.starts.append(s)
            out.ends.append(e)
            out.example.append(n)
            out.offset.append(len(head))
            out.offsets.append(offsets[begin:stop])
            if stop >= len(c_ids):
                break
            begin += room - doc_stride
        out.unreachable += not reached
    return out


class QABatches(SampledBatches):
    """Shuffled, resumable batches of windows."""

    def __init__(self, features: QAFeatures, batch_size: int, pad_id: int, seed: int, use_types: bool) -> None:
        self.features, self.batch_size, self.pad_id, self.use_types = features, batch_size, pad_id, use_types
        self.sampler = EpochSampler(np.arange(len(features)), seed)

    def batch_of(self, indices: list[int]) -> dict[str, torch.Tensor]:
        f = self.features
        input_ids, attention_mask = pad_batch([f.input_ids[i] for i in indices], self.pad_id)
        batch = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "start_positions": torch.tensor([f.starts[i] for i in indices], dtype=torch.long),
            "end_positions": torch.tensor([f.ends[i] for i in indices], dtype=torch.long),
        }
        if self.use_types:
            batch["token_type_ids"] = pad_batch([f.token_types[i] for i in indices], 0)[0]
        return batch

    def next_batch(self) -> dict[str, torch.Tensor]:
        return self.batch_of([index for _, index in self.sampler.take(self.batch_size)])


# ----------------------------------------------------------------------------------- model and objective


class QuestionAnswerer(nn.Module):
    """Encoder + one linear layer (hidden -> start, end) on every token: Hugging Face's *ForQuestionAnswering
    (`qa_outputs`, no dropout before it). The pooler, if the encoder has one, is kept but not trained."""

    def __init__(self, encoder: BertEncoder) -> None:
        super().__init__()
        self.encoder = encoder
        if encoder.pooler is not None:
            encoder.pooler.requires_grad_(False)
        self.head = build_task_head(encoder.config)  # ModernBERT's, on every token; None for the others
        self.qa_outputs = nn.Linear(encoder.config.hidden_size, 2)
        init_weights(self.qa_outputs)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        hidden = self.encoder(input_ids, attention_mask, token_type_ids).last_hidden_state
        logits = self.qa_outputs(hidden if self.head is None else self.head(hidden))
        start, end = logits.float().unbind(-1)
        return {"start_logits": start, "end_logits": end}


class QAObjective(Objective):
    """(cross-entropy of the start position + of the end position) / 2, summed over windows and divided by the
    global number of windows (a target is a window, counted from the batch alone)."""

    name = "qa"

    def count(self, batch: dict[str, torch.Tensor]) -> float:
        return float(batch["input_ids"].shape[0])

    def __call__(
        self, model: nn.Module, batch: dict[str, torch.Tensor], totals: Counts | None = None
    ) -> tuple[torch.Tensor, Metrics]:
        total = (totals or self.counts(batch))[self.name]
        out = model(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
        start, end = out["start_logits"], out["end_logits"]
        mask = batch["attention_mask"].to(start.device)
        start = start.masked_fill(~mask.bool(), torch.finfo(start.dtype).min)
        end = end.masked_fill(~mask.bool(), torch.finfo(end.dtype).min)
        loss = (
            F.cross_entropy(start, batch["start_positions"], reduction="sum")
            + F.cross_entropy(end, batch["end_positions"], reduction="sum")
        ) / 2
        with torch.no_grad():
            right = ((start.argmax(-1) == batch["start_positions"]) & (end.argmax(-1) == batch["end_positions"])).sum()
        return share(loss, total), {"span_acc": share(right.float(), total)}


qa_objective = QAObjective()


# ---------------------------------------------------------------------------------------- post-processing


def window_logits(
    model: nn.Module, features: QAFeatures, device: torch.device, pad_id: int, use_types: bool, batch_size: int = 64
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Start and end logits of every window (unpadded), in order; batches of similar length."""
    order = np.argsort([len(ids) for ids in features.input_ids], kind="stable")
    out: list[Any] = [None] * len(features)
    with torch.no_grad():
        for begin in range(0, len(order), batch_size):
            rows = [int(i) for i in order[begin : begin + batch_size]]
            ids, mask = pad_batch([features.input_ids[i] for i in rows], pad_id)
            types = pad_batch([features.token_types[i] for i in rows], 0)[0].to(device) if use_types else None
            result = model(ids.to(device), mask.to(device), types)
            starts, ends = result["start_logits"].float().cpu().numpy(), result["end_logits"].float().cpu().numpy()
            for j, i in enumerate(rows):
                n = len(features.input_ids[i])
                out[i] = (starts[j, :n], ends[j, :n])
    return out


@dataclass
class Answer:
    text: str
    start: int | None  # character offsets into the context (None: no answer)
    end: int | None
    score: float


def best_answers(
    examples: list[QAExample],
    features: QAFeatures,
    logits: list[tuple[np.ndarray, np.ndarray]],
    n_best: int = 20,
    max_answer_length: int = 30,
    with_null: bool = False,
    null_threshold: float = 0.0,
) -> list[Answer]:
    """The best span of each example over all its windows (transformers' postprocess_qa_predictions):
    the `n_best` highest start and end logits of each window, pairs inside the context with end >= start and
    at most `max_answer_length` tokens, scored start + end logit. `with_null` (SQuAD v2.0): the empty answer
    when the null score (the lowest [CLS] start + end over windows) exceeds the best span's by `null_threshold`."""
    windows: dict[int, list[int]] = collections.defaultdict(list)
    for w, n in enumerate(features.example):
        windows[n].append(w)
    answers = []
    for n, example in enumerate(examples):
        best: Answer | None = None
        null = None
        for w in windows[n]:
            start_logits, end_logits = logits[w]
            off, spans = features.offset[w], features.offsets[w]
            score0 = float(start_logits[0] + end_logits[0])
            null = score0 if null is None else min(null, score0)
            context = slice(off, off + len(spans))
            s_top = off + np.argsort(start_logits[context])[::-1][:n_best]
            e_top = off + np.argsort(end_logits[context])[::-1][:n_best]
            for s in s_top:
                for e in e_top:
                    if e < s or e - s + 1 > max_answer_length:
                        continue
                    score = float(start_logits[s] + end_logits[e])
                    if best is None or score > best.score:
                        c0, c1 = int(spans[s - off][0]), int(spans[e - off][1])
                        best = Answer(example.context[c0:c1], c0, c1, score)
        if best is None or (with_null and null is not None and null - best.score > null_threshold):
            best = Answer("", None, None, float(null if null is not None else 0.0))
        answers.append(best)
    return answers


# ----------------------------------------------------------------------------------------------- metrics

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, punctuation removed, articles removed, whitespace collapsed."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_score(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str) -> float:
    """Token-overlap F1 of the normalised answers; an empty side scores 1 only against another empty side."""
    pred, true = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not true:
        return float(pred == true)
    common = collections.Counter(pred) & collections.Counter(true)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(true)
    return 2 * precision * recall / (precision + recall)


def squad_scores(golds: list[list[str]], predictions: list[str], with_null: bool = False) -> dict[str, float]:
    """Exact match and F1 in percent, each question's maximum over its gold answers (no gold answer: the
    empty answer is gold, as in SQuAD v2.0's script). `with_null` adds HasAns_* and NoAns_* scores."""
    exact, f1 = [], []
    for gold, prediction in zip(golds, predictions, strict=True):
        options = [g for g in gold if normalize_answer(g)] or [""]
        exact.append(max(exact_score(prediction, g) for g in options))
        f1.append(max(f1_score(prediction, g) for g in options))
    total = len(golds)

    def pct(values: list[float]) -> float:
        return round(100.0 * sum(values) / len(values), 4) if values else 0.0

    scores: dict[str, float] = {"exact_match": pct(exact), "f1": pct(f1), "total": total}
    if with_null:
        has = [i for i, g in enumerate(golds) if any(normalize_answer(x) for x in g)]
        no = [i for i in range(total) if i not in set(has)]
        for name, part in (("HasAns", has), ("NoAns", no)):
            scores[f"{name}_exact"] = pct([exact[i] for i in part])
            scores[f"{name}_f1"] = pct([f1[i] for i in part])
            scores[f"{name}_total"] = len(part)
    return scores


def evaluate_qa(
    model: nn.Module,
    examples: list[QAExample],
    features: QAFeatures,
    device: torch.device,
    pad_id: int,
    use_types: bool,
    task: Any,
    with_null: bool,
    batch_size: int = 64,
) -> dict[str, float]:
    logits = window_logits(model, features, device, pad_id, use_types, batch_size)
    answers = best_answers(
        examples, features, logits, task.n_best, task.max_answer_length, with_null, task.null_threshold
    )
    scores = squad_scores([e.answers for e in examples], [a.text for a in answers], with_null)
    scores["examples"] = len(examples)
    return scores
