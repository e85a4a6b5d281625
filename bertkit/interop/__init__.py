"""Hugging Face interchange through explicit key maps; `transformers` itself is never needed to train."""
