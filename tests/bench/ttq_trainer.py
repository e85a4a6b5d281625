"""The baseline a user would otherwise run: transformers' Trainer pretraining BERT with masked language modelling in
the way of transformers' examples/pytorch/language-modeling/run_mlm.py (texts tokenized, concatenated and cut into
128-token blocks; `DataCollatorForLanguageModeling(mlm_probability=0.15)`; AdamW, 6% warm-up, linear decay).

With `--recipe crammed` the same Trainer runs bertkit's crammed-bert recipe instead, so that the recipe's effect
and the engine's can be told apart: transformers' ModernBertForMaskedLM of the bench's shape, built from the
configuration bertkit exports for it (pre-LN, no biases, GeGLU, rotary positions, no dropout), 40% masking, peak
rate 2e-3, AdamW betas (0.9, 0.98) and eps 1e-12, clipping at 0.5, 6% warm-up and linear decay to zero over the
budget's steps. What the Trainer cannot express: the batch ramp (it keeps the full batch of 32 from the first
step), and bertkit's sparse prediction and unpadding, which are the engine's (transformers' defaults stay).

`max_steps` is calibrated from a short probe run so that the schedule ends at the time budget. The weights are
saved at every tenth of the steps; the time the Trainer spent before each save is recorded (saving excluded), so
the bench can score the curve afterwards with the same evaluator as bertkit's.

Run by tests/bench/test_time_to_quality.py as its own process: python ttq_trainer.py ARGS (see `main`)."""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path


def blocks(text_file: Path, tokenizer, block_size: int):
    """run_mlm's group_texts: every line tokenized with its [CLS] ... [SEP], concatenated, cut into full blocks."""
    import torch

    ids: list[int] = []
    for line in text_file.read_text("utf-8").splitlines():
        if line.strip():
            ids.extend(tokenizer(line)["input_ids"])
    usable = len(ids) // block_size * block_size
    return torch.tensor(ids[:usable]).view(-1, block_size)


class Blocks:
    def __init__(self, data) -> None:
        self.data = data

    def __len__(self) -> int:
        return self.data.shape[0]

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.data[index]}


# What each recipe sets in the Trainer: masking rate, peak rate (run_mlm's: the --lr argument), AdamW's epsilon,
# gradient clipping.
RECIPES = {
    "run_mlm": {"mlm_probability": 0.15, "lr": None, "adam_epsilon": 1e-6, "max_grad_norm": 1.0},
    "crammed": {"mlm_probability": 0.4, "lr": 2e-3, "adam_epsilon": 1e-12, "max_grad_norm": 0.5},
}


def crammed_model(args: argparse.Namespace, tokenizer):
    """transformers' ModernBertForMaskedLM as bertkit's crammed-bert recipe builds it at the bench's shape."""
    import transformers

    from bertkit.config.recipe import load_recipe
    from bertkit.interop.hf import config_to_hf

    shape = {"hidden_size": args.hidden, "num_layers": args.layers, "num_heads": args.heads,
             "intermediate_size": args.intermediate, "max_position_embeddings": args.block_size,
             "vocab_size": tokenizer.vocab_size, "pad_token_id": tokenizer.pad_token_id}  # fmt: skip
    recipe = load_recipe("crammed-bert", [f"model.{key}={value}" for key, value in shape.items()])
    hf = {**config_to_hf(recipe.model), "cls_token_id": tokenizer.cls_token_id, "sep_token_id": tokenizer.sep_token_id}
    return transformers.ModernBertForMaskedLM(transformers.ModernBertConfig(**hf))


def train(args: argparse.Namespace, data, tokenizer, max_steps: int, output: Path | None) -> dict:
    import torch
    import transformers

    torch.manual_seed(0)
    if args.recipe == "crammed":
        model = crammed_model(args, tokenizer)
    else:
        config = transformers.BertConfig(
            vocab_size=tokenizer.vocab_size,
            hidden_size=args.hidden,
            num_hidden_layers=args.layers,
            num_attention_heads=args.heads,
            intermediate_size=args.intermediate,
            max_position_embeddings=args.block_size,
            type_vocab_size=2,
        )
        model = transformers.BertForMaskedLM(config)
    recipe = RECIPES[args.recipe]
    collator = transformers.DataCollatorForLanguageModeling(tokenizer, mlm_probability=recipe["mlm_probability"])
    marks = {round(max_steps * k / args.snapshots) for k in range(1, args.snapshots + 1)}
    clock: dict = {"start": None, "paused": 0.0, "rows": []}

    class Snapshots(transformers.TrainerCallback):
        def on_step_begin(self, _args, state, control, **kwargs):
            if clock["start"] is None:
                clock["start"] = time.perf_counter()

        def on_step_end(self, _args, state, control, **kwargs):
            if state.global_step == 5:
                clock["after_5"] = time.perf_counter()
            clock["end"] = time.perf_counter()
            if output is None or state.global_step not in marks:
                return
            began = time.perf_counter()
            seconds = began - clock["start"] - clock["paused"]
            path = output / f"step-{state.global_step}"
            model.save_pretrained(path)
            tokenizer.save_pretrained(path)  # so `bertkit finetune -m PATH` reads it as a transformers checkpoint
            row = {"step": state.global_step, "train_seconds": round(seconds, 3)}
            row["tokens"] = state.global_step * args.batch_size * args.block_size
            clock["rows"].append({**row, "path": str(path)})
            clock["paused"] += time.perf_counter() - began

    training_args = transformers.TrainingArguments(
        output_dir=str(output or Path(args.output) / "probe"),
        per_device_train_batch_size=args.batch_size,
        learning_rate=recipe["lr"] or args.lr,
        weight_decay=0.01,
        adam_beta1=0.9,
        adam_beta2=0.98,
        adam_epsilon=recipe["adam_epsilon"],
        max_grad_norm=recipe["max_grad_norm"],
        warmup_steps=0.06,  # transformers 5: a float below 1 is a share of the steps (warmup_ratio before)
        lr_scheduler_type="linear",
        max_steps=max_steps,
        logging_steps=50,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        dataloader_num_workers=0,
        dataloader_drop_last=True,
        seed=0,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(
        model=model, args=training_args, train_dataset=Blocks(data), data_collator=collator, callbacks=[Snapshots()]
    )
    started = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - started
    steady = (clock["end"] - clock["after_5"]) / (max_steps - 5) if max_steps > 5 else wall / max_steps
    return {"rows": clock["rows"], "wall": wall, "train_seconds": wall - clock["paused"], "step_seconds": steady}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train-text", type=Path, required=True)
    parser.add_argument("--tokenizer", type=Path, required=True)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--budget-seconds", type=float, required=True)
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="run_mlm")
    parser.add_argument("--lr", type=float, default=1e-3, help="run_mlm's peak rate (crammed: 2e-3, its recipe's)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--intermediate", type=int, default=1024, help="crammed: the gated width (680 at 256 wide)")
    parser.add_argument("--snapshots", type=int, default=10)
    parser.add_argument("--probe-steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch
    import transformers

    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(args.tokenizer))
    data = blocks(args.train_text, tokenizer, args.block_size)
    # The probe: seconds per step past the first five (start-up), what a user calibrating max_steps would measure.
    probe = train(args, data, tokenizer, args.probe_steps, None)
    per_step = probe["step_seconds"]
    max_steps = max(args.snapshots, math.floor(args.budget_seconds / per_step))
    args.output.mkdir(parents=True, exist_ok=True)
    result = train(args, data, tokenizer, max_steps, args.output)
    summary = {"max_steps": max_steps, "probe_seconds_per_step": per_step, "blocks": int(data.shape[0]), **result}
    (args.output / "trainer_summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
