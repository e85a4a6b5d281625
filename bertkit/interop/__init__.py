"""Hugging Face interchange through explicit key maps, configs and state dicts in, configs and state dicts out;
`transformers` itself is never needed to train. Files are modelio's (bertkit/modelio/hf_dir.py), exports export's."""
