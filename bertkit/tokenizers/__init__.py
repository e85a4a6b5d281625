"""Tokenizer families (WordPiece, byte-level BPE, SentencePiece) behind one interface."""

from bertkit.tokenizers.base import Tokenizer, load_tokenizer

__all__ = ["Tokenizer", "load_tokenizer"]
