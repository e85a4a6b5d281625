"""`bertkit predict`, one module per part:

run.py     `predict`: sequence and token tasks, and the dispatch on the model's architecture
qa.py      question answering
common.py  what they (and embed) share: the model to run (PyTorch or ONNX Runtime), output sink, device, threads
speed.py   sentences per second and accuracy of a run and its ONNX exports, loaded as predict loads them
"""
