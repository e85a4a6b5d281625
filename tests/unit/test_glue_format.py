"""The GLUE benchmark's TSV files, read exactly as its distribution unpacks them (task.columns, task.quoting).

Each file here has one GLUE task's exact layout (header or none, column names and order, label values, tabs,
no quoting) and holds real sentences: Rotten Tomatoes reviews (`sentiment_csv`) for the single-sentence tasks
and STS benchmark pairs (`stsb_dir`) for the pair tasks. GLUE's files are not CSV-quoted and their sentences
hold unbalanced double quotes; a field that starts with one makes a CSV reader swallow the separators and
lines after it. The STS benchmark has such sentences as they are; the reviews quote with \u201c \u201d only, so
a review's quoted phrase, typed with ASCII quotes, is cut inside the phrase, as GLUE's SST-2 phrases are.
Files are written with plain tab joins: csv.writer would quote them, which GLUE never does.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from bertkit.config.schema import TaskConfig
from bertkit.errors import BertkitError
from bertkit.tasks.data import read_task_data, read_task_file

COLA_COLUMNS = ["source", "label", "mark", "sentence"]
ROWS = 10  # per file: enough for every kind of sentence below, small enough to compare exactly
QUOTED_PHRASE = re.compile(r'"[^"]* [^"]*"')  # a quoted phrase of two words or more: somewhere to cut inside
QUOTES = re.compile('["\u201c\u201d]')


def cut_in_quote(sentence: str) -> tuple[str, str]:
    """A real sentence cut after the first word inside its quoted phrase, leaving the quote unbalanced:
    (from the sentence's start: the quote mid-field, from the opening quote: the quote starts the field)."""
    phrase = QUOTED_PHRASE.search(sentence)
    assert phrase is not None
    end = sentence.index(" ", phrase.start() + 2)  # +2: at least one character after the quote
    assert end < phrase.end() - 1, "the cut must fall inside the quoted phrase"
    return sentence[:end], sentence[phrase.start() : end]


def ascii_quotes(text: str) -> str:
    return text.replace("\u201c", '"').replace("\u201d", '"')


def single_rows(reviews: list[tuple[str, str]], nth: int) -> list[tuple[str, str]]:
    """ROWS reviews. The reviews type their quotes as \u201c \u201d, never as GLUE's ASCII '"', and none is
    unbalanced: so the `nth` review with a quoted phrase, its quotes typed as ASCII, is cut inside the phrase
    from the opening quote (the field starts with an unbalanced quote) and from its start (the quote
    mid-field). Then that review as it is, two with commas, and plain ones; every row keeps its real label."""
    typed = [ascii_quotes(text) for text, _ in reviews]
    # a quoted phrase after the start, so that the two cuts differ
    quoted = [i for i, t in enumerate(typed) if t.count('"') == 2 and t.index('"') > 0 and QUOTED_PHRASE.search(t)]
    commas = [i for i, (text, _) in enumerate(reviews) if "," in text and not QUOTES.search(text)]
    assert len(quoted) > nth and len(commas) > 2 * nth + 1, "the reviews should hold quoted phrases and commas"
    chosen = [quoted[nth], *commas[2 * nth : 2 * nth + 2]]
    text, label = reviews[quoted[nth]]
    mid, start = cut_in_quote(ascii_quotes(text))
    rest = [r for i, r in enumerate(reviews) if i not in chosen and not QUOTES.search(r[0])][nth * ROWS :]
    return ([(start, label), (mid, label)] + [reviews[i] for i in chosen] + rest)[:ROWS]


def pair_rows(pairs: list[tuple[str, str, str]], nth: int) -> list[tuple[str, str, str]]:
    """ROWS pairs of the STS benchmark, which has GLUE's quotes as they are: first one whose first sentence
    starts with an unbalanced quote, then one with an unbalanced quote mid-sentence, one with a quoted phrase,
    two with commas, then plain ones. `nth` picks other ones, so that every file of a task has its own."""
    first = [s1 for s1, _, _ in pairs]
    starts = [i for i, s in enumerate(first) if s.startswith('"') and s.count('"') == 1]
    inside = [i for i, s in enumerate(first) if s.count('"') % 2 == 1 and not s.startswith('"')]
    phrases = [i for i, s in enumerate(first) if s.count('"') == 2 and QUOTED_PHRASE.search(s)]
    commas = [i for i, (s1, s2, _) in enumerate(pairs) if "," in s1 and '"' not in s1 + s2]
    assert len(starts) > nth and inside and len(phrases) > nth and len(commas) > 2 * nth + 1
    chosen = [starts[nth], inside[nth % len(inside)], phrases[nth], *commas[2 * nth : 2 * nth + 2]]
    rest = [p for i, p in enumerate(pairs) if i not in chosen and '"' not in p[0] + p[1]][nth * ROWS :]
    return ([pairs[i] for i in chosen] + rest)[:ROWS]


def stsb_pairs(stsb_dir: Path, split: str) -> list[tuple[str, str, str]]:
    with open(stsb_dir / f"{split}.tsv", encoding="utf-8", newline="") as handle:  # conftest wrote it quoted
        return [(r["sentence1"], r["sentence2"], r["score"]) for r in csv.DictReader(handle, delimiter="\t")]


@dataclass
class Sample:
    """Real rows for the files of a task: a training file's and up to two evaluation files'."""

    singles: list[tuple[str, str]]  # (review, "1" positive / "0" negative): CoLA's and SST-2's labels are 0/1
    dev_singles: list[tuple[str, str]]
    pairs: list[tuple[str, str, str]]  # (sentence1, sentence2, score)
    dev_pairs: list[tuple[str, str, str]]
    dev_pairs_2: list[tuple[str, str, str]]


@pytest.fixture(scope="module")
def sample(sentiment_csv: Path, stsb_dir: Path) -> Sample:
    with open(sentiment_csv, encoding="utf-8", newline="") as handle:
        reviews = [(r["text"], "1" if r["label"] == "positive" else "0") for r in csv.DictReader(handle)]
    train, dev = stsb_pairs(stsb_dir, "train"), stsb_pairs(stsb_dir, "dev")
    return Sample(
        single_rows(reviews, 0), single_rows(reviews, 1), pair_rows(train, 0), pair_rows(dev, 0), pair_rows(dev, 1)
    )


def write_tsv(path: Path, header: list[str] | None, rows: list[list[str]]) -> Path:
    """GLUE's way: fields joined by tabs, one row a line, nothing quoted or escaped."""
    for row in rows:
        assert all("\t" not in f and "\n" not in f for f in row)
    lines = ([header] if header else []) + rows
    path.write_bytes("".join("\t".join(line) + "\n" for line in lines).encode("utf-8"))
    return path


@dataclass
class GlueFile:
    path: Path
    task: TaskConfig  # reads the file as it is: quoting none
    texts: list[str]
    pairs: list[str] | None
    labels: list[Any]


def nli_label(score: str) -> str:
    return "entailment" if float(score) >= 4 else "neutral" if float(score) >= 2 else "contradiction"


def cola(tmp_path: Path, sample: Sample) -> list[GlueFile]:
    # No header. CoLA marks an unacceptable sentence (label 0) with its author's "*"; acceptable ones have none.
    task = TaskConfig(text_field="sentence", columns=COLA_COLUMNS, quoting="none")
    files = []
    for name, part in (("train.tsv", sample.singles), ("dev.tsv", sample.dev_singles)):
        rows = [["gj04", label, "" if label == "1" else "*", text] for text, label in part]
        path = write_tsv(tmp_path / name, None, rows)
        files.append(GlueFile(path, task, [t for t, _ in part], None, [lab for _, lab in part]))
    return files


def sst2(tmp_path: Path, sample: Sample) -> list[GlueFile]:
    task = TaskConfig(text_field="sentence", quoting="none")
    rows = sample.singles
    path = write_tsv(tmp_path / "train.tsv", ["sentence", "label"], [[t, lab] for t, lab in rows])
    return [GlueFile(path, task, [t for t, _ in rows], None, [lab for _, lab in rows])]


def pair_file(path: Path, task: TaskConfig, header: list[str], rows: list, labels: list, line: Callable) -> GlueFile:
    """A pair task's file: `line(index, sentence1, sentence2, label)` lays out one row's fields."""
    lines = [line(i, s1, s2, label) for i, ((s1, s2, _), label) in enumerate(zip(rows, labels, strict=True))]
    write_tsv(path, header, lines)
    return GlueFile(path, task, [r[0] for r in rows], [r[1] for r in rows], labels)


def mrpc(tmp_path: Path, sample: Sample) -> list[GlueFile]:
    header = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
    task = TaskConfig(text_field="#1 String", text_pair_field="#2 String", label_field="Quality", quoting="none")
    quality = ["1" if float(score) >= 3.5 else "0" for _, _, score in sample.pairs]
    return [pair_file(tmp_path / "msr_paraphrase_train.tsv", task, header, sample.pairs, quality,
                      lambda i, s1, s2, q: [q, str(702876 + 2 * i), str(702877 + 2 * i), s1, s2])]  # fmt: skip


def stsb(tmp_path: Path, sample: Sample) -> list[GlueFile]:
    header = ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2",
              "score"]  # fmt: skip
    task = TaskConfig(
        kind="regression", text_field="sentence1", text_pair_field="sentence2", label_field="score", quoting="none"
    )
    scores = [score for _, _, score in sample.pairs]
    glue_file = pair_file(tmp_path / "train.tsv", task, header, sample.pairs, scores,
                          lambda i, s1, s2, y: [str(i), "main-news", "headlines", "2015", f"{i:04d}", "none", "none",
                                                s1, s2, y])  # fmt: skip
    glue_file.labels = [float(y) for y in scores]  # regression reads numbers
    return [glue_file]


def qqp(tmp_path: Path, sample: Sample) -> list[GlueFile]:
    header = ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]
    task = TaskConfig(text_field="question1", text_pair_field="question2", label_field="is_duplicate", quoting="none")
    duplicate = ["1" if float(score) >= 4 else "0" for _, _, score in sample.pairs]
    return [pair_file(tmp_path / "train.tsv", task, header, sample.pairs, duplicate,
                      lambda i, s1, s2, d: [str(i), str(2 * i + 1), str(2 * i + 2), s1, s2, d])]  # fmt: skip


def mnli(tmp_path: Path, sample: Sample) -> list[GlueFile]:
    # train: one annotator's label before gold_label (12 columns); the dev files: five (16 columns).
    start = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
             "sentence1_parse", "sentence2_parse", "sentence1", "sentence2"]  # fmt: skip
    task = TaskConfig(text_field="sentence1", text_pair_field="sentence2", label_field="gold_label", quoting="none")

    def binary(s: str) -> str:
        return "( " + " ".join(s.split()) + " )"

    def parse(s: str) -> str:
        return "(ROOT (S " + " ".join(f"(X {w})" for w in s.split()) + "))"

    files = []
    layouts = (
        ("train.tsv", sample.pairs, 1, "fiction"),
        ("dev_matched.tsv", sample.dev_pairs, 5, "government"),
        ("dev_mismatched.tsv", sample.dev_pairs_2, 5, "letters"),
    )
    for name, rows, annotators, genre in layouts:
        header = start + [f"label{n}" for n in range(1, annotators + 1)] + ["gold_label"]
        gold = [nli_label(score) for _, _, score in rows]
        files.append(pair_file(tmp_path / name, task, header, rows, gold,
                               lambda i, s1, s2, g, genre=genre, annotators=annotators: [
                                   str(i), str(31193 + i), f"{31193 + i}n", genre, binary(s1), binary(s2), parse(s1),
                                   parse(s2), s1, s2] + [g] * (annotators + 1)))  # fmt: skip
    return files


def entailment(tmp_path: Path, sample: Sample, text: str, pair: str) -> list[GlueFile]:
    """QNLI's and RTE's layout: index, the two sentences, entailment / not_entailment."""
    task = TaskConfig(text_field=text, text_pair_field=pair, quoting="none")
    labels = ["entailment" if float(score) >= 3 else "not_entailment" for _, _, score in sample.pairs]
    return [pair_file(tmp_path / "train.tsv", task, ["index", text, pair, "label"], sample.pairs, labels,
                      lambda i, s1, s2, lab: [str(i), s1, s2, lab])]  # fmt: skip


def qnli(tmp_path: Path, sample: Sample) -> list[GlueFile]:
    return entailment(tmp_path, sample, "question", "sentence")


def rte(tmp_path: Path, sample: Sample) -> list[GlueFile]:
    return entailment(tmp_path, sample, "sentence1", "sentence2")


TASKS: dict[str, Callable[[Path, Sample], list[GlueFile]]] = {
    "CoLA": cola, "SST-2": sst2, "MRPC": mrpc, "STS-B": stsb, "QQP": qqp, "MNLI": mnli, "QNLI": qnli, "RTE": rte
}  # fmt: skip


@pytest.fixture
def glue(tmp_path: Path, sample: Sample) -> Callable[[str], list[GlueFile]]:
    return lambda name: TASKS[name](tmp_path, sample)


def test_the_sentences_are_the_hard_ones(sample: Sample) -> None:
    """What every file must hold for the tests below to prove anything: a field that starts with an unbalanced
    quote, a quote inside a field, and commas."""
    for rows in (sample.singles, sample.dev_singles, sample.pairs, sample.dev_pairs, sample.dev_pairs_2):
        texts = [row[0] for row in rows]
        assert len(rows) == ROWS
        assert texts[0].startswith('"') and texts[0].count('"') == 1
        assert any('"' in t and not t.startswith('"') for t in texts)
        assert any("," in t for t in texts)
    assert sample.singles[1][0].count('"') == 1 and not sample.singles[1][0].startswith('"')
    assert "\u201c" in sample.singles[2][0]  # the cut review as it is: typographic quotes read back too
    assert sample.singles != sample.dev_singles and sample.dev_pairs != sample.dev_pairs_2


@pytest.mark.parametrize("name", list(TASKS))
def test_glue_files_read_back_exactly(glue: Callable[[str], list[GlueFile]], name: str) -> None:
    files = glue(name)
    for expected in files:
        data = read_task_file(expected.path, expected.task, None)
        lines = expected.path.read_text("utf-8").splitlines()
        written = len(lines) - (0 if expected.task.columns else 1)  # less the header, where there is one
        assert data.rows_read == len(data) == written == len(expected.texts) == ROWS
        assert data.skipped == 0
        assert data.texts == expected.texts  # quotes and commas intact
        assert data.pairs == expected.pairs
        assert data.labels == expected.labels
    if name == "MNLI":  # one task config reads train (12 columns) and both dev files (15)
        assert [len(f.path.read_text("utf-8").splitlines()[0].split("\t")) for f in files] == [12, 16, 16]


@pytest.mark.parametrize("name", list(TASKS))
def test_csv_quoting_misreads_glue_files(glue: Callable[[str], list[GlueFile]], name: str) -> None:
    """The same files read with CSV quoting (the default) fail or come back wrong: the option matters."""
    for expected in glue(name):
        task = TaskConfig.model_validate({**expected.task.model_dump(), "quoting": "csv"})
        try:
            data = read_task_file(expected.path, task, None)
        except BertkitError as err:
            assert str(expected.path) in str(err)
            continue
        assert (data.texts, data.pairs, data.labels) != (expected.texts, expected.pairs, expected.labels)


def test_quoting_is_csv_by_default_and_columns_unset() -> None:
    task = TaskConfig()
    assert task.quoting == "csv" and task.columns is None
    with pytest.raises(ValidationError):
        TaskConfig(quoting="tsv")  # type: ignore[arg-type]


def test_headerless_row_with_wrong_field_count_names_the_row(tmp_path: Path, sample: Sample) -> None:
    rows = [["gj04", lab, "" if lab == "1" else "*", text] for text, lab in sample.singles[:4]]
    rows[2] = rows[2][:2] + rows[2][3:]  # the author's mark column dropped: 3 fields
    path = write_tsv(tmp_path / "train.tsv", None, rows)
    task = TaskConfig(text_field="sentence", columns=COLA_COLUMNS, quoting="none")
    with pytest.raises(BertkitError) as err:
        read_task_file(path, task, None)
    message = str(err.value)
    assert str(path) in message and "row 3 (line 3): has 3 fields, task.columns names 4" in message
    data = read_task_file(path, task.model_copy(update={"skip_bad_rows": True}), None)
    assert data.rows_read == 4 and data.skipped == 1 and len(data) == 3
    assert data.texts == [sample.singles[i][0] for i in (0, 1, 3)]
    assert data.skipped_rows[0].startswith("row 3 (line 3)")


def test_headerless_columns_must_name_the_fields(tmp_path: Path, sample: Sample) -> None:
    path = write_tsv(tmp_path / "train.tsv", None, [["gj04", lab, "", text] for text, lab in sample.singles[:3]])
    task = TaskConfig(text_field="text", columns=COLA_COLUMNS, quoting="none")
    with pytest.raises(BertkitError, match="no column 'text' \\(columns named by task.columns: 'source'"):
        read_task_file(path, task, None)


def test_columns_on_a_file_with_a_header_is_refused(tmp_path: Path, sample: Sample) -> None:
    """The header would be read as an example (its "label" a class): refused, not trained on."""
    rows = [["gj04", lab, "", text] for text, lab in sample.singles[:3]]
    path = write_tsv(tmp_path / "train.tsv", COLA_COLUMNS, rows)
    task = TaskConfig(text_field="sentence", columns=COLA_COLUMNS, quoting="none")
    with pytest.raises(BertkitError, match="line 1 is a header"):
        read_task_file(path, task, None)


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_columns_on_a_file_that_names_its_fields_is_one_line_error(
    tmp_path: Path, sample: Sample, suffix: str
) -> None:
    records = [{"sentence": text, "label": lab} for text, lab in sample.singles[:3]]
    path = tmp_path / f"train{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(records), path)
    assert read_task_data(path, "sentence").texts == [r["sentence"] for r in records]
    with pytest.raises(BertkitError) as err:
        read_task_data(path, "sentence", columns=["sentence", "label"])
    message = str(err.value)
    assert "\n" not in message
    assert "task.columns applies to CSV/TSV files without a header" in message and str(path) in message


@pytest.mark.parametrize(
    ("columns", "needle"),
    [([], "task.columns is empty"), (["source", "label", "mark", "label"], "'label' more than once"),
     (["source", " ", "sentence"], "column 2 has a blank name")],
)  # fmt: skip
def test_task_config_refuses_bad_columns(columns: list[str], needle: str) -> None:
    with pytest.raises(ValidationError, match=needle):
        TaskConfig(text_field="sentence", columns=columns)


def test_columns_only_for_kinds_that_read_csv() -> None:
    with pytest.raises(ValidationError, match="task.columns does not apply to a token-classification task"):
        TaskConfig(kind="token-classification", columns=["tokens", "tags"])


def test_unquoted_headerless_keeps_the_file_checks(tmp_path: Path, sample: Sample) -> None:
    """A byte-order mark and \\r\\n line ends are read as with a header; bytes that are not UTF-8 name the row."""
    rows = [["gj04", lab, "" if lab == "1" else "*", text] for text, lab in sample.singles[:3]]
    task = TaskConfig(text_field="sentence", columns=COLA_COLUMNS, quoting="none")
    path = tmp_path / "train.tsv"
    path.write_bytes(b"\xef\xbb\xbf" + "".join("\t".join(r) + "\r\n" for r in rows).encode("utf-8"))
    data = read_task_file(path, task, None)
    assert data.texts == [text for text, _ in sample.singles[:3]] and data.labels == [r[1] for r in rows]
    path.write_bytes("".join("\t".join(r) + "\n" for r in rows).encode("utf-8") + b"gj04\t1\t\tcaf\xe9\n")
    with pytest.raises(BertkitError, match="row 4 \\(line 4\\): column 'sentence' is not UTF-8"):
        read_task_file(path, task, None)
