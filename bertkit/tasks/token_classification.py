"""Token classification (NER, POS): one tag per word, read from CoNLL, CoNLL-U or JSON lines.

- Files: CoNLL (one token and its tag per line, tab or space separated, the tag in the last column so
  CoNLL-2003's four columns work too; a blank line between sentences; `-DOCSTART-` lines skipped),
  CoNLL-U (`.conllu`: token = FORM, tag = UPOS; comments, multi-word ranges and empty nodes skipped) and
  JSON lines (`.jsonl`/`.json`/`.ndjson`: `{"tokens": [...], "tags": [...]}`).
- Tag schemes: BIO, IOB1 and IOBES are checked and converted to BIO, which the model learns and predicts;
  `none` is plain tags (POS). A tag the scheme does not allow is one error naming file, line and fix.
- Alignment: words are joined by spaces and tokenized once with character offsets; each token belongs to
  the word its characters fall in. The word's label sits on its first sub-word; later sub-words, special
  tokens and padding carry IGNORE and are no targets (the objective neither counts nor scores them).
- Metrics: entities by exact span match, as seqeval computes them by default (an I- tag that follows O or
  another type starts an entity), micro-averaged precision, recall and F1; and word-level tag accuracy.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertkit.corpus.loader import EpochSampler, SampledBatches, pad_batch
from bertkit.errors import BertkitError
from bertkit.inputs.formats import file_format
from bertkit.models.bert import BertEncoder
from bertkit.models.layers import init_weights
from bertkit.models.pretraining import build_task_head
from bertkit.objectives.base import Counts, Metrics, Objective, share
from bertkit.tokenizers.base import Tokenizer

IGNORE = -100  # the label of positions that are no target (later sub-words, specials, padding)
SCHEMES = ("auto", "bio", "iob1", "iobes", "none")
_SHAPE = re.compile(r"^([BIES])-(.+)$")
_UNDECODABLE = re.compile("[\udc80-\udcff]")


# ------------------------------------------------------------------------------------------------ reading


@dataclass
class TokenData:
    """Sentences (words and their tags) and, for messages, the file line of every word."""

    path: Path
    words: list[list[str]] = field(default_factory=list)
    tags: list[list[str]] = field(default_factory=list)
    lines: list[list[int]] = field(default_factory=list)
    rows_read: int = 0  # sentences read
    scheme: str = "none"  # the scheme the tags were read in (after auto detection)

    def __len__(self) -> int:
        return len(self.words)

    def subset(self, indices: np.ndarray) -> TokenData:
        pick = [int(i) for i in indices]
        return TokenData(
            self.path, [self.words[i] for i in pick], [self.tags[i] for i in pick], [self.lines[i] for i in pick],
            len(pick), self.scheme,
        )  # fmt: skip

    def tag_counts(self) -> dict[str, int]:
        return dict(sorted(Counter(tag for sentence in self.tags for tag in sentence).items()))


def token_file_format(path: Path) -> str:
    """conllu, jsonl, or conll (CoNLL's token-tab-tag lines: any other name), by the one format detection."""
    form = file_format(path)
    return form if form in ("conllu", "jsonl") else "conll"


def _read_lines(path: Path) -> list[str]:
    from bertkit.inputs.sources import read_text, split_lines

    if not path.exists():
        raise BertkitError(f"task file not found: {path}")
    if path.is_dir():
        raise BertkitError(f"{path} is a directory; token classification reads CoNLL, CoNLL-U or JSON lines files")
    return split_lines(read_text(path))


def read_token_file(path: Path) -> TokenData:
    """Sentences of `path` with their raw tags (no scheme applied yet)."""
    path = Path(path)
    kind = token_file_format(path)
    lines = _read_lines(path)
    data = TokenData(path)
    if kind == "jsonl":
        _read_jsonl(path, lines, data)
    else:
        _read_conll(path, lines, data, conllu=kind == "conllu")
    if not data.words:
        what = "JSON lines with 'tokens' and 'tags'" if kind == "jsonl" else "token/tag lines"
        raise BertkitError(f"{path} holds no sentences; give a file of {what}")
    return data


def _add(data: TokenData, words: list[str], tags: list[str], lines: list[int]) -> None:
    if words:
        data.words.append(words)
        data.tags.append(tags)
        data.lines.append(lines)
        data.rows_read += 1


def _read_conll(path: Path, lines: list[str], data: TokenData, conllu: bool) -> None:
    words: list[str] = []
    tags: list[str] = []
    where: list[int] = []
    for number, line in enumerate(lines, 1):
        if _UNDECODABLE.search(line):
            raise BertkitError(f"{path} line {number} is not UTF-8 text; re-encode the file as UTF-8")
        if not line.strip():
            _add(data, words, tags, where)
            words, tags, where = [], [], []
            continue
        if conllu:
            if line.startswith("#"):
                continue
            columns = line.split("\t")
            if len(columns) != 10:
                raise BertkitError(
                    f"{path} line {number}: a CoNLL-U token line has 10 tab-separated columns, this one "
                    f"{len(columns)}; fix the line (or name the file .conll for token/tag columns)"
                )
            if not columns[0].isdigit():  # 3-4 multi-word ranges and 5.1 empty nodes carry no UPOS of their own
                continue
            word, tag = columns[1], columns[3]
        else:
            columns = [c.strip() for c in line.split("\t")] if "\t" in line else line.split()
            columns = [c for c in columns if c]
            if columns and columns[0] == "-DOCSTART-":
                continue
            if len(columns) < 2:
                raise BertkitError(
                    f"{path} line {number}: '{line.strip()[:40]}' has a token but no tag; write "
                    "'token<TAB>tag' on each line, with a blank line between sentences"
                )
            word, tag = columns[0], columns[-1]
        words.append(word)
        tags.append(tag)
        where.append(number)
    _add(data, words, tags, where)


def _read_jsonl(path: Path, lines: list[str], data: TokenData) -> None:
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise BertkitError(
                f"{path} line {number} is not valid JSON ({err.msg}); is this a JSON lines file?"
            ) from None
        if (
            not isinstance(row, dict)
            or not isinstance(row.get("tokens"), list)
            or not isinstance(row.get("tags"), list)
        ):
            raise BertkitError(
                f"{path} line {number}: expected an object with lists 'tokens' and 'tags', e.g. "
                '{"tokens": ["Paris", "is"], "tags": ["B-LOC", "O"]}; fix the line'
            )
        tokens, tags = row["tokens"], row["tags"]
        if len(tokens) != len(tags):
            raise BertkitError(
                f"{path} line {number}: {len(tokens)} tokens but {len(tags)} tags; give one tag per token"
            )
        if not all(isinstance(t, str) and t.strip() and not any(c.isspace() for c in t) for t in tokens):
            raise BertkitError(f"{path} line {number}: every token must be a non-empty string without spaces")
        if not all(isinstance(t, str) and t for t in tags):
            raise BertkitError(
                f"{path} line {number}: tags must be tag names (strings such as 'B-PER'), not "
                f"{type(next(t for t in tags if not (isinstance(t, str) and t))).__name__}; write the names"
            )
        _add(data, list(tokens), list(tags), [number] * len(tokens))


# ------------------------------------------------------------------------------------------- tag schemes


def split_tag(tag: str) -> tuple[str, str] | None:
    """('O', '') for O, (prefix, type) for B-/I-/E-/S-TYPE, None for a tag of another shape."""
    if tag == "O":
        return "O", ""
    match = _SHAPE.match(tag)
    return (match.group(1), match.group(2)) if match else None


def detect_scheme(data: TokenData) -> str:
    """none when no tag is prefixed, iobes when any E-/S- tag occurs, iob1 when an I- tag begins an entity
    (after O or another type), else bio. A mix of prefixed and plain tags is an error."""
    shaped = plain = None
    for s, tags in enumerate(data.tags):
        for w, tag in enumerate(tags):
            parts = split_tag(tag)
            if parts is None:
                plain = plain or (s, w)
            elif parts[0] != "O":
                shaped = shaped or (s, w)
    if shaped is None:
        return "none"
    if plain is not None:
        s, w = plain
        raise BertkitError(
            f"{data.path} line {data.lines[s][w]}: tag '{data.tags[s][w]}' is neither O nor B-/I-/E-/S-TYPE while "
            f"other tags are (e.g. '{data.tags[shaped[0]][shaped[1]]}'); fix the tag, or for plain tags (POS) "
            "set --set task.tag_scheme=none"
        )
    prefixes = {split_tag(tag)[0] for tags in data.tags for tag in tags}  # type: ignore[index]
    if prefixes & {"E", "S"}:
        return "iobes"
    for tags in data.tags:
        previous = ("O", "")
        for tag in tags:
            parts = split_tag(tag)
            assert parts is not None
            if parts[0] == "I" and (previous[0] == "O" or previous[1] != parts[1]):
                return "iob1"
            previous = parts
    return "bio"


def to_bio(data: TokenData, scheme: str) -> list[list[str]]:
    """The tags of `data` checked against `scheme` and converted to BIO (`none`: unchanged)."""
    if scheme == "none":
        return [list(tags) for tags in data.tags]
    allowed = {"bio": "BIO", "iob1": "BIO", "iobes": "BIOES"}[scheme]
    out = []
    for s, tags in enumerate(data.tags):
        parsed = []
        for w, tag in enumerate(tags):
            parts = split_tag(tag)
            if parts is None or parts[0] not in allowed:
                hint = (
                    "set --set task.tag_scheme=iobes (or auto)" if parts is not None
                    else "write O or B-/I-TYPE, or for plain tags (POS) set --set task.tag_scheme=none"
                )  # fmt: skip
                raise BertkitError(
                    f"{data.path} line {data.lines[s][w]}: tag '{tag}' is not valid {scheme.upper()}; "
                    f"fix the tag, or {hint}"
                )
            parsed.append(parts)
        if scheme == "iobes":
            _check_iobes(data, s, parsed)
        bio = []
        previous = ("O", "")
        for prefix, kind in parsed:
            if prefix == "O":
                bio.append("O")
            elif prefix in ("B", "S"):
                bio.append(f"B-{kind}")
            elif scheme == "iob1" and (previous[0] == "O" or previous[1] != kind):
                bio.append(f"B-{kind}")  # IOB1: I- begins a chunk unless it continues one of its type
            else:
                bio.append(f"I-{kind}")  # I-/E- (IOBES, checked to continue B-/I- of their type), BIO I-
            previous = (prefix, kind)
        out.append(bio)
    return out


def _check_iobes(data: TokenData, s: int, parsed: list[tuple[str, str]]) -> None:
    for w, (prefix, kind) in enumerate(parsed):
        before = parsed[w - 1] if w else ("O", "")
        after = parsed[w + 1] if w + 1 < len(parsed) else ("O", "")
        problem = None
        if prefix in ("I", "E") and not (before[0] in ("B", "I") and before[1] == kind):
            prev = data.tags[s][w - 1] if w else "(sentence start)"
            problem = f"follows '{prev}', but IOBES {prefix}- continues B-/I-{kind}"
        elif prefix in ("B", "I") and not (after[0] in ("I", "E") and after[1] == kind):
            nxt = data.tags[s][w + 1] if w + 1 < len(parsed) else "(sentence end)"
            problem = f"is followed by '{nxt}', but IOBES {prefix}- needs I-/E-{kind} next (a one-word entity is S-)"
        if problem:
            raise BertkitError(
                f"{data.path} line {data.lines[s][w]}: tag '{data.tags[s][w]}' {problem}; fix the tags, or declare "
                "the file's real scheme with --set task.tag_scheme=bio|iob1"
            )


def resolve_tags(data: TokenData, declared: str) -> list[list[str]]:
    """Apply the declared (or detected) scheme to `data`: its tags in BIO, and `data.scheme` set."""
    if declared not in SCHEMES:
        raise BertkitError(f"task.tag_scheme must be one of {', '.join(SCHEMES)}, not '{declared}'")
    data.scheme = detect_scheme(data) if declared == "auto" else declared
    return to_bio(data, data.scheme)


# ----------------------------------------------------------------------------------------------- metrics


def entities(tags: list[str | None]) -> list[tuple[str, int, int]]:
    """(type, first word, end word exclusive) of every entity in a BIO sequence, as seqeval's default mode
    reads it: B- starts an entity; I- continues one of its type, or else starts one; O (or None) ends it."""
    found: list[tuple[str, int, int]] = []
    current: tuple[str, int] | None = None
    for i, tag in enumerate(tags):
        parts = split_tag(tag) if tag else ("O", "")
        prefix, kind = parts if parts is not None else ("O", "")
        if prefix == "I" and current is not None and current[0] == kind:
            continue
        if current is not None:
            found.append((current[0], current[1], i))
            current = None
        if prefix in ("B", "I"):
            current = (kind, i)
    if current is not None:
        found.append((current[0], current[1], len(tags)))
    return found


def tagging_scores(gold: list[list[str]], predicted: list[list[str | None]], with_entities: bool) -> dict[str, float]:
    """Entity-level micro precision/recall/F1 (exact type and span) and word accuracy; an entity is found only
    if the predicted span is exactly the gold span with the same type."""
    words = sum(len(g) for g in gold)
    right = sum(p == g for gs, ps in zip(gold, predicted, strict=True) for g, p in zip(gs, ps, strict=True))
    scores: dict[str, float] = {}
    if with_entities:
        true = {(s, *e) for s, tags in enumerate(gold) for e in entities(list(tags))}
        guess = {(s, *e) for s, tags in enumerate(predicted) for e in entities(tags)}
        hits = len(true & guess)
        precision = hits / len(guess) if guess else 0.0
        recall = hits / len(true) if true else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        scores = {"f1": round(f1, 4), "precision": round(precision, 4), "recall": round(recall, 4),
                  "entities": len(true), "predicted_entities": len(guess)}  # fmt: skip
    scores["accuracy"] = round(right / words, 4) if words else 0.0
    return scores


# ------------------------------------------------------------------------------------------------ encoding


def word_offsets(words: list[str]) -> tuple[str, list[tuple[int, int]]]:
    """The words joined by single spaces, and each word's (start, end) in that text."""
    spans, position = [], 0
    for word in words:
        spans.append((position, position + len(word)))
        position += len(word) + 1
    return " ".join(words), spans


def split_words(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    """Whitespace-separated words of `text` with their character spans in it."""
    found = [(m.group(0), m.span()) for m in re.finditer(r"\S+", text)]
    return [w for w, _ in found], [s for _, s in found]


@dataclass
class TokenExamples:
    input_ids: list[np.ndarray]
    labels: list[np.ndarray]  # per token: the word's tag index on its first sub-word, IGNORE elsewhere
    positions: list[np.ndarray]  # per word: the position of its first sub-word, -1 if it has none (truncated)
    truncated: int = 0  # sentences with words past the length limit


def encode_words(
    texts: list[str],
    spans: list[list[tuple[int, int]]],
    tokenizer: Tokenizer,
    max_len: int,
    tag_ids: list[list[int]] | None = None,
) -> TokenExamples:
    """`[CLS] sub-words [SEP]` of each text (at most `max_len`), each word's first sub-word position, and,
    with `tag_ids`, the label of each position."""
    encodings = tokenizer.backend.encode_batch(texts, add_special_tokens=False)
    out = TokenExamples([], [], [])
    keep = max_len - 2
    for n, (text, word_spans, enc) in enumerate(zip(texts, spans, encodings, strict=True)):
        owner = np.full(len(text) + 1, -1, dtype=np.int64)
        for w, (start, end) in enumerate(word_spans):
            owner[start:end] = w
        positions = np.full(len(word_spans), -1, dtype=np.int64)
        ids = enc.ids[:keep]
        for k, (start, end) in enumerate(enc.offsets[:keep]):
            word = next((int(owner[c]) for c in range(start, end) if owner[c] >= 0), -1)
            if word >= 0 and positions[word] < 0:
                positions[word] = k + 1  # after [CLS]
        if len(enc.ids) > keep and any(p < 0 for p in positions):
            out.truncated += 1
        labels = np.full(len(ids) + 2, IGNORE, dtype=np.int64)
        if tag_ids is not None:
            for w, position in enumerate(positions):
                if position >= 0:
                    labels[position] = tag_ids[n][w]
        out.input_ids.append(np.asarray([tokenizer.cls_id, *ids, tokenizer.sep_id], dtype=np.int64))
        out.labels.append(labels)
        out.positions.append(positions)
    return out


def encode_sentences(
    words: list[list[str]], tags: list[list[str]] | None, names: list[str], tokenizer: Tokenizer, max_len: int
) -> TokenExamples:
    joined = [word_offsets(w) for w in words]
    tag_ids = None
    if tags is not None:
        index = {name: i for i, name in enumerate(names)}
        tag_ids = [[index[t] for t in sentence] for sentence in tags]
    return encode_words([t for t, _ in joined], [s for _, s in joined], tokenizer, max_len, tag_ids)


def tag_indices_check(tags: list[list[str]], names: list[str], source: object) -> None:
    unknown = sorted({t for sentence in tags for t in sentence} - set(names))
    if unknown:
        raise BertkitError(
            f"{source}: tags {unknown[:5]} do not occur in the training data (known: {names[:10]}); "
            "evaluate on a file with the training tags"
        )


class TokenBatches(SampledBatches):
    """Shuffled, resumable batches of tagged sentences."""

    def __init__(self, examples: TokenExamples, batch_size: int, pad_id: int, seed: int) -> None:
        self.examples, self.batch_size, self.pad_id = examples, batch_size, pad_id
        self.sampler = EpochSampler(np.arange(len(examples.input_ids)), seed)

    def batch_of(self, indices: list[int]) -> dict[str, torch.Tensor]:
        input_ids, attention_mask = pad_batch([self.examples.input_ids[i] for i in indices], self.pad_id)
        labels, _ = pad_batch([self.examples.labels[i] for i in indices], IGNORE)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}

    def next_batch(self) -> dict[str, torch.Tensor]:
        return self.batch_of([index for _, index in self.sampler.take(self.batch_size)])


# ----------------------------------------------------------------------------------- model and objective


class TokenClassifier(nn.Module):
    """Encoder + dropout + linear layer on every token's last hidden state (BERT's NER head; the layout of
    Hugging Face's *ForTokenClassification). The pooler, if the encoder has one, is kept but not trained."""

    def __init__(self, encoder: BertEncoder, num_labels: int, dropout: float) -> None:
        super().__init__()
        self.encoder = encoder
        if encoder.pooler is not None:
            encoder.pooler.requires_grad_(False)
        self.head = build_task_head(encoder.config)  # ModernBERT's, on every token; None for the others
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.config.hidden_size, num_labels)
        init_weights(self.classifier)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        hidden = self.encoder(input_ids, attention_mask, token_type_ids).last_hidden_state
        if self.head is not None:
            hidden = self.head(hidden)
        return {"logits": self.classifier(self.dropout(hidden))}


@torch.no_grad()
def word_features(
    model: TokenClassifier, examples: TokenExamples, device: torch.device, pad_id: int, batch_size: int = 32
) -> tuple[torch.Tensor, torch.Tensor]:
    """What the frozen tagger's classifier layer reads at every labelled position (each word's first sub-word),
    and the tag there: ((words, hidden), (words,)), on the CPU. Sentences go through in order of length, so a batch
    pads little; the encoder and its head are in evaluation mode (no dropout)."""
    was_training = model.training
    model.eval().to(device)
    batches = TokenBatches(examples, batch_size, pad_id, 0)
    order = sorted(range(len(examples.input_ids)), key=lambda i: len(examples.input_ids[i]))
    features, tags = [], []
    for start in range(0, len(order), batch_size):
        batch = batches.batch_of(order[start : start + batch_size])
        hidden = model.encoder(batch["input_ids"].to(device), batch["attention_mask"].to(device)).last_hidden_state
        if model.head is not None:
            hidden = model.head(hidden)
        labelled = batch["labels"] != IGNORE
        features.append(hidden[labelled.to(device)].float().cpu())
        tags.append(batch["labels"][labelled])
    model.train(was_training)
    return torch.cat(features), torch.cat(tags)


class TokenClassificationObjective(Objective):
    """Cross-entropy over the labelled positions (each word's first sub-word). Target: a labelled position,
    counted from the batch alone, so the loop divides the sum by the global number of labelled words."""

    name = "token_classification"

    def count(self, batch: dict[str, torch.Tensor]) -> float:
        return float((batch["labels"] != IGNORE).sum().item())

    def __call__(
        self, model: nn.Module, batch: dict[str, torch.Tensor], totals: Counts | None = None
    ) -> tuple[torch.Tensor, Metrics]:
        total = (totals or self.counts(batch))[self.name]
        logits = model(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))["logits"].float()
        labels = batch["labels"]
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE, reduction="sum")
        with torch.no_grad():
            right = ((logits.argmax(-1) == labels) & (labels != IGNORE)).float().sum()
        return share(loss, total), {"acc": share(right, total)}


token_classification_objective = TokenClassificationObjective()


def predict_word_tags(
    model: nn.Module,
    examples: TokenExamples,
    names: list[str],
    device: torch.device,
    pad_id: int,
    batch_size: int = 64,
    with_scores: bool = False,
) -> list[list[str | None]]:
    """The argmax tag of every word (None for a word without a sub-word, e.g. truncated), in input order."""
    out: list[list[str | None]] = []
    total = len(examples.input_ids)
    for start in range(0, total, batch_size):
        rows = list(range(start, min(total, start + batch_size)))
        input_ids, mask = pad_batch([examples.input_ids[i] for i in rows], pad_id)
        with torch.no_grad():
            logits = model(input_ids.to(device), mask.to(device))["logits"].float()
        best = logits.argmax(-1).cpu().numpy()
        for j, i in enumerate(rows):
            out.append([names[int(best[j, p])] if p >= 0 else None for p in examples.positions[i]])
    return out


def evaluate_tagger(
    model: nn.Module,
    examples: TokenExamples,
    gold: list[list[str]],
    names: list[str],
    device: torch.device,
    pad_id: int,
    with_entities: bool,
    batch_size: int = 64,
) -> dict[str, float]:
    """Entity P/R/F1 and word accuracy over every sentence; a word the model never saw (truncated) counts as O."""
    predicted = predict_word_tags(model, examples, names, device, pad_id, batch_size)
    if with_entities:
        predicted = [[tag or "O" for tag in tags] for tags in predicted]
    scores = tagging_scores(gold, predicted, with_entities)
    scores["examples"] = len(gold)
    return scores


def tag_record(
    text: str, spans: list[tuple[int, int]], tags: list[str | None], with_entities: bool = True
) -> dict[str, Any]:
    """{"entities": [{"type", "start", "end", "text"}], "tags": [...]}: an entity's start and end are
    character offsets into `text` (end exclusive), from its first word's start to its last word's end,
    so text[start:end] is exactly its text. A word the model did not see (truncated) is tagged O."""
    if with_entities:
        tags = [tag or "O" for tag in tags]
    found = []
    for kind, first, end in entities(tags) if with_entities else []:
        start, stop = spans[first][0], spans[end - 1][1]
        found.append({"type": kind, "start": start, "end": stop, "text": text[start:stop]})
    return {"entities": found, "tags": tags}
