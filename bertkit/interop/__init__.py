"""Hugging Face interchange through explicit key maps: configs and state dicts in, configs and state dicts out;
`transformers` itself is never needed to train. An HF directory on disk is bertkit/modelio/hf_dir.py's, and
`bertkit export` bertkit/export's."""
