"""`engine.precision=auto` on a CPU with native bf16: fp32, bf16 autocast and what `auto` picks, side by side, at the
shapes of the shipped recipes (bert-tiny, crammed-bert-tiny, electra-small, bert-base), masked-LM pretraining steps
in bertkit's loop.

Each recipe's model (its family, widths and depth; the 30,522-token uncased WordPiece of the MiniLM fixture as
vocabulary), the same corpus of 128-token sequences of the session's text, the same masks, batch 16 (8 for the
base shapes), timed over 40 steps (6 at base size) after two warm-up steps, the best of two rounds. What must hold:
`auto` is never slower than fp32 (within 5%, the run-to-run noise of a shared 2-core machine), and it picks the
faster of the two where they differ by more than that. On a CPU without native bf16 `auto` is fp32 by the flags,
with no measurement: the bench is skipped.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from bench_helpers import Timed, mlm_batches
from records import figure, write_record

RECIPES = ("bert-tiny", "crammed-bert-tiny", "electra-small", "bert-base")
WARMUP = 2
ROUNDS = 2  # each precision's best of two, so that a slow moment of a shared machine does not decide


@pytest.fixture(scope="module")
def corpus(minilm_dir: Path, text_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from bertkit.corpus.build import BuildOptions, build_corpus

    output = tmp_path_factory.mktemp("precision") / "corpus"
    build_corpus([text_file], minilm_dir, output, BuildOptions(max_seq_len=128))
    return output


def _tokens_per_second(corpus: Path, recipe: str, precision: str, tmp: Path) -> tuple[float, str]:
    from bertkit.config.recipe import load_recipe
    from bertkit.config.schema import EngineConfig, OptimConfig, ScheduleConfig, TrainConfig
    from bertkit.engine.loop import train
    from bertkit.models.pretraining import PretrainingModel
    from bertkit.objectives.mlm import MLMObjective

    cfg = load_recipe(recipe, []).model
    batch = 8 if cfg.hidden_size >= 768 else 16
    steps = 6 if cfg.hidden_size >= 768 else 40  # a few seconds of timing at every width
    source, tok = mlm_batches(corpus, batch)
    cfg = cfg.model_copy(update={"vocab_size": tok.vocab_size, "pad_token_id": tok.pad_id})
    torch.manual_seed(0)
    model = PretrainingModel(cfg)
    timed = Timed(source, WARMUP, steps)  # the clock stops when the step after the timed ones fetches its batch
    train_cfg = TrainConfig(steps=steps + WARMUP + 1, batch_size=batch, log_every=steps + WARMUP + 1)
    engine = EngineConfig(device="cpu", precision=precision, tensorboard=False)
    result = train(model, MLMObjective(), timed, tmp, train_cfg, OptimConfig(lr=1e-4), ScheduleConfig(), engine,
                   quiet=True, description="pretrain")  # fmt: skip
    return timed.tokens / timed.seconds, result.precision


@pytest.mark.bench
def test_auto_precision_is_never_slower_than_fp32(corpus: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    from bertkit.engine.cpu import cpu_info

    if not cpu_info().native_bf16:
        pytest.skip("this CPU has no native bf16: auto is fp32 by its flags")
    monkeypatch.delenv("BERTKIT_CPU_BF16", raising=False)  # the test suite pins fp32; auto measures here
    figures, problems = {}, []
    picked = ""
    for recipe in RECIPES:
        rates: dict[str, float] = {}
        for round_ in range(ROUNDS):
            for precision in ("fp32", "bf16", "auto"):
                run = tmp_path / f"{recipe}-{precision}-{round_}"
                rate, chosen = _tokens_per_second(corpus, recipe, precision, run)
                rates[precision] = max(rate, rates.get(precision, 0.0))
                picked = chosen if precision == "auto" else picked
        fp32, bf16, auto = rates["fp32"], rates["bf16"], rates["auto"]
        faster = "bf16" if bf16 > fp32 else "fp32"
        with capsys.disabled():
            print(f"\n[bench] {recipe:18} fp32 {fp32:8.0f}  bf16 {bf16:8.0f}  auto ({picked}) {auto:8.0f} tokens/s")
        if auto < 0.95 * fp32:
            problems.append(f"{recipe}: auto ({picked}) {auto:.0f} tokens/s against fp32 {fp32:.0f}")
        if max(fp32, bf16) > 1.05 * min(fp32, bf16) and picked != faster:
            problems.append(f"{recipe}: auto picked {picked}, {faster} was faster ({fp32:.0f} / {bf16:.0f})")
        key = recipe.replace("-", "_")
        figures[f"{key}_fp32_tokens_per_s"] = figure(round(fp32), "tokens/s", "fp32")
        figures[f"{key}_bf16_tokens_per_s"] = figure(round(bf16), "tokens/s", "bf16 autocast")
        figures[f"{key}_auto_tokens_per_s"] = figure(round(auto), "tokens/s", "bertkit", note=f"auto picked {picked}")
    write_record("precision-auto-cpu", "pytest -m bench tests/bench/test_precision_bench.py",
                 {"recipes": list(RECIPES), "steps": {"base": 6, "smaller": 40}, "warmup": WARMUP, "rounds": ROUNDS,
                  "seq": 128,
                  "flags": sorted({"amx_bf16", "avx512_bf16"} & cpu_info().flags)}, figures, "auto")  # fmt: skip
    assert not problems, problems
