"""A model on disk: where a command's model argument points, and reading and writing what is there.

weights.py   the safetensors weights file (model.safetensors): write, read
modeldir.py  bertkit's model directory (bertkit_model.json + weights + tokenizer): save and load, and
             `resolve_model_path`, the one resolution order of a model argument: model directory, run
             directory, Hugging Face checkpoint directory (read through hf_dir.py), hub name
hf_dir.py    a Hugging Face checkpoint directory (config.json + model.safetensors): read, through the key maps
             of bertkit/interop/hf.py, and write
layout.py    the file names of a model or tokenizer directory, and `tokenizer_source` (what a --tokenizer
             argument names), without torch: build-corpus and its workers import it
hub.py       Hugging Face hub names (short aliases, the hub cache, offline mode, download); teachers only
"""
