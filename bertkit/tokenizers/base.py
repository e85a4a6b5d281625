"""One tokenizer interface over the Hugging Face `tokenizers` library, with HF tokenizer dirs in and out.

A bertkit tokenizer directory holds `tokenizer.json` (the HF fast-tokenizer format, which
`transformers.AutoTokenizer` loads), the family's native files (`vocab.txt`; `vocab.json` + `merges.txt`;
`spm.model`), and `bertkit_tokenizer.json` naming the family and its special tokens. Foreign directories
load too: a `tokenizer.json`, or only the native files of a BERT, RoBERTa or SentencePiece model.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from bertkit.errors import BertkitError, rust_io_errors_as_os_errors
from bertkit.tokenizers.specials import (
    FAMILY_SPECIALS,
    KINDS,
    ROLES,
    WORDPIECE_SPECIALS,
    SpecialTokens,
    guess_specials,
)

BERTKIT_TOKENIZER_FILE = "bertkit_tokenizer.json"

__all__ = ["BERTKIT_TOKENIZER_FILE", "KINDS", "ROLES", "SpecialTokens", "Tokenizer", "load_tokenizer"]


class Tokenizer:
    """A loaded tokenizer: ids of the special tokens, batch encoding without per-line Python loops."""

    def __init__(
        self,
        backend,
        kind: str,
        specials: SpecialTokens,
        path: Path | None = None,
        spm_model: bytes | None = None,
    ) -> None:
        self.backend = backend  # tokenizers.Tokenizer
        self.kind = kind
        self.specials = specials
        self.path = path
        self.spm_model = spm_model  # the SentencePiece model the backend mirrors, saved as spm.model
        # What `tokenize extend` added to: the base tokenizer's fingerprint and size, and each new word's ids under
        # it (bertkit/tokenizers/extend.py); None for a tokenizer that extends none.
        self.extends: dict | None = None
        ids = {}
        for role in ROLES:
            token = getattr(specials, role)
            token_id = backend.token_to_id(token)
            if token_id is None:
                raise BertkitError(
                    f"tokenizer{f' {path}' if path else ''} has no {role} token '{token}'; "
                    "retrain it with `bertkit tokenize train` or add the token to its vocabulary"
                )
            ids[role] = token_id
        self.pad_id, self.unk_id = ids["pad"], ids["unk"]
        self.cls_id, self.sep_id, self.mask_id = ids["cls"], ids["sep"], ids["mask"]
        self.special_ids = frozenset(ids.values())

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Ids without special tokens, for many texts at once (parallel inside `tokenizers`).

        `encode_batch_fast` skips computing character offsets, which nothing here needs.
        """
        return [enc.ids for enc in self.backend.encode_batch_fast(texts, add_special_tokens=False)]

    def encode_batch_with_words(self, texts: list[str]) -> tuple[list[list[int]], list[list[int | None]]]:
        """Ids plus, per token, the index of the word it belongs to (for whole-word masking)."""
        encodings = self.backend.encode_batch(texts, add_special_tokens=False)
        return [e.ids for e in encodings], [e.word_ids for e in encodings]

    def encode(self, text: str, pair: str | None = None, add_special_tokens: bool = True) -> list[int]:
        return self.backend.encode(text, pair, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(ids, skip_special_tokens=skip_special_tokens)

    def normalize(self, text: str) -> str:
        """The text as the tokenizer sees it before splitting (what decoding gives back at best)."""
        return self.backend.normalizer.normalize_str(text) if self.backend.normalizer else text

    def id_to_token(self, token_id: int) -> str | None:
        return self.backend.id_to_token(token_id)

    def fingerprint(self) -> str:
        """A hash of the full tokenizer definition, recorded in corpus manifests and checkpoints."""
        return hashlib.sha256(self.backend.to_str().encode("utf-8")).hexdigest()[:16]

    def save(self, directory: Path) -> None:
        """Write tokenizer.json, the family's native files, and the configs transformers looks for."""
        from bertkit.tokenizers.bbpe import write_vocab_and_merges
        from bertkit.tokenizers.spm import SPM_MODEL_FILE
        from bertkit.tokenizers.wordpiece import write_vocab_txt

        directory.mkdir(parents=True, exist_ok=True)
        with rust_io_errors_as_os_errors(directory / "tokenizer.json"):
            self.backend.save(str(directory / "tokenizer.json"))
        if self.kind == "wordpiece":
            write_vocab_txt(self.backend, directory)
        elif self.kind == "bbpe":
            write_vocab_and_merges(self.backend, directory)
        if self.spm_model is not None:
            (directory / SPM_MODEL_FILE).write_bytes(self.spm_model)
        meta: dict = {"kind": self.kind, "special_tokens": self.specials.as_dict()}
        if self.extends is not None:
            meta["extends"] = self.extends
        (directory / BERTKIT_TOKENIZER_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        # PreTrainedTokenizerFast takes tokenizer.json as it is. A model-specific class (BertTokenizer in
        # transformers 5) would rebuild the pipeline from its own options and lose what bertkit set, such as
        # accent stripping that keeps Hangul whole.
        hf_config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": 512,
            "clean_up_tokenization_spaces": False,
            # BERT, ALBERT and ELECTRA have segment embeddings; RoBERTa (byte-level BPE) has none.
            "model_input_names": ["input_ids", "attention_mask"]
            if self.kind == "bbpe"
            else ["input_ids", "token_type_ids", "attention_mask"],
            **{f"{role}_token": getattr(self.specials, role) for role in ROLES},
        }
        (directory / "tokenizer_config.json").write_text(json.dumps(hf_config, indent=2) + "\n", "utf-8")
        special_map = {f"{role}_token": getattr(self.specials, role) for role in ROLES}
        (directory / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2) + "\n", "utf-8")


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise BertkitError(f"{path} is not valid JSON: {err}") from None
    return data if isinstance(data, dict) else {}


def _kind_of(backend) -> str:
    """The family of a tokenizer.json bertkit did not write, from its model and pre-tokenizer."""
    definition = json.loads(backend.to_str())
    model_type = (definition.get("model") or {}).get("type")
    pre = json.dumps(definition.get("pre_tokenizer") or {})
    if model_type == "WordPiece":
        return "wordpiece"
    if model_type == "Unigram":
        return "sentencepiece-unigram"
    if model_type == "BPE":
        return "bbpe" if "ByteLevel" in pre else "sentencepiece-bpe"
    raise BertkitError(f"unsupported tokenizer model '{model_type}': bertkit reads WordPiece, BPE and Unigram")


def _backend_from_native(directory: Path, hf_config: dict):
    """A directory without tokenizer.json: BERT's vocab.txt, RoBERTa's vocab.json+merges.txt, or an spm model."""
    from bertkit.tokenizers.bbpe import bbpe_from_files
    from bertkit.tokenizers.spm import SPM_MODEL_NAMES, backend_from_spm, finish_spm, spm_kind
    from bertkit.tokenizers.wordpiece import wordpiece_from_vocab

    if (directory / "vocab.txt").is_file():
        return wordpiece_from_vocab(directory / "vocab.txt", hf_config), "wordpiece", None
    if (directory / "vocab.json").is_file() and (directory / "merges.txt").is_file():
        return bbpe_from_files(directory / "vocab.json", directory / "merges.txt"), "bbpe", None
    for name in SPM_MODEL_NAMES:
        if (directory / name).is_file():
            model = (directory / name).read_bytes()
            backend = backend_from_spm(model)
            finish_spm(backend)
            return backend, spm_kind(model), model
    raise BertkitError(
        f"{directory} is not a tokenizer directory: it has none of tokenizer.json, vocab.txt, "
        "vocab.json+merges.txt or spm.model (train one with `bertkit tokenize train`)"
    )


def load_tokenizer(directory: Path | str) -> Tokenizer:
    """Load a bertkit tokenizer directory or a Hugging Face one (tokenizer.json or the native files)."""
    from tokenizers import Tokenizer as HFTokenizer

    from bertkit.tokenizers.spm import SPM_MODEL_FILE

    directory = Path(directory)
    if not directory.is_dir():
        raise BertkitError(f"tokenizer directory not found: {directory}")
    meta = _read_json(directory / BERTKIT_TOKENIZER_FILE)
    hf_config = _read_json(directory / "tokenizer_config.json")
    spm_model = None
    if (directory / "tokenizer.json").is_file():
        try:
            backend = HFTokenizer.from_file(str(directory / "tokenizer.json"))
        except Exception as err:  # the Rust library raises a bare Exception on a malformed file
            raise BertkitError(f"{directory / 'tokenizer.json'} is not a valid tokenizer file: {err}") from None
        kind = meta.get("kind") or _kind_of(backend)
        if (directory / SPM_MODEL_FILE).is_file():
            spm_model = (directory / SPM_MODEL_FILE).read_bytes()
    else:
        backend, kind, spm_model = _backend_from_native(directory, hf_config)
        kind = meta.get("kind") or kind
    if kind not in KINDS:
        raise BertkitError(f"{directory}: unknown tokenizer kind '{kind}' in {BERTKIT_TOKENIZER_FILE}")
    if isinstance(meta.get("special_tokens"), dict):
        try:
            specials = SpecialTokens(**meta["special_tokens"])
        except TypeError:
            raise BertkitError(f"{directory / BERTKIT_TOKENIZER_FILE}: special_tokens must name {ROLES}") from None
    else:
        declared = {**_read_json(directory / "special_tokens_map.json"), **hf_config}
        guessed, missing = guess_specials(lambda tok: backend.token_to_id(tok) is not None, declared)
        if guessed is None:
            expected = FAMILY_SPECIALS.get(kind, WORDPIECE_SPECIALS)
            raise BertkitError(
                f"{directory}: cannot find the {', '.join(missing)} token(s) in this vocabulary "
                f"(looked for e.g. {', '.join(getattr(expected, r) for r in missing)}); "
                "bertkit needs all of pad, unk, cls, sep and mask"
            )
        specials = guessed
    # Padding and truncation would silently change what `encode` returns; bertkit pads in the collator.
    backend.no_padding()
    backend.no_truncation()
    tokenizer = Tokenizer(backend, kind, specials, directory, spm_model)
    if isinstance(meta.get("extends"), dict):
        tokenizer.extends = meta["extends"]
    return tokenizer
