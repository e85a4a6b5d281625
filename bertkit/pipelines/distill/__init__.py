"""`bertkit distill`, one module per stage:

general.py    `distill_general`: the general stage, on a pretraining corpus
task.py       `distill_task`: the task stage, on labelled data (TinyBERT's two phases)
task_data.py  the task stage's data, student and evaluation, for the kind of model the teacher was fine-tuned as
"""
