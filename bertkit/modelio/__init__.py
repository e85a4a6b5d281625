"""A model on disk: where a command's model argument points, and reading and writing what is there.

weights.py   the safetensors weights file (model.safetensors): write, read
modeldir.py  bertkit's model directory (bertkit_model.json + weights + tokenizer): save, find, load; HF
             checkpoint directories are read through bertkit/interop/hf.py
"""
