"""`bertkit export`: a bertkit model in, a Hugging Face checkpoint or an ONNX directory out.

hf.py             `--to hf`: config.json + model.safetensors + tokenizer, through bertkit/interop's key maps
onnx.py           `--to onnx`: the traced graph, checked against PyTorch before anything is written
onnx_quantize.py  `--quantize int8` and the accuracy gate that keeps it honest
onnx_runtime.py   an ONNX export run by ONNX Runtime; also what `bertkit predict` and `bertkit embed` use
"""
