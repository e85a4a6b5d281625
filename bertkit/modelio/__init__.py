"""A model on disk: where a command's model argument points, and reading and writing what is there.

weights.py   the safetensors weights file (model.safetensors): write, read
modeldir.py  bertkit's model directory (bertkit_model.json + weights + tokenizer): save and load, and
             `resolve_model_path`, the one resolution order of a model argument: model directory, run
             directory, Hugging Face checkpoint directory (read through bertkit/interop/hf.py), hub name
hub.py       Hugging Face hub names (short aliases, the hub cache, offline mode, download); teachers only
"""
