"""The library calls behind the training subcommands; the CLI only parses arguments and calls these.

pretrain.py    `bertkit pretrain`
finetune/      `bertkit finetune` (run.py, tokens.py, qa.py, common.py)
distill/       `bertkit distill` (general.py, task.py, task_data.py)
predict/       `bertkit predict` (run.py, qa.py, common.py) and the inference speed table (speed.py)
embed.py       `bertkit embed`
augment.py     `bertkit augment`
compress.py    `bertkit compress`: a fine-tuned classifier to a small one (augment, task distillation, baseline)
quickstart.py  `bertkit quickstart`: the whole pipeline on real sample text
quickstart_data.py  `bertkit quickstart --data-only`: its sample data and the reviews' split, without torch
rundir.py      the run directory every training command shares: recipe, metrics, checkpoints, resume, summary
"""
