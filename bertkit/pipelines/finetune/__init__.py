"""`bertkit finetune`, one module per part:

run.py     `finetune`: sequence tasks (classification, multi-label, regression) and the dispatch on `task.kind`
tokens.py  token classification (NER, POS)
qa.py      extractive question answering
common.py  what they (and the distillation task stage) share: epoch plan, best-model keeping, summary entries
"""
