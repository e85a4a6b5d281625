"""One tokenizer interface over the Hugging Face `tokenizers` library, with HF tokenizer dirs in and out.

A bertkit tokenizer directory holds `tokenizer.json` (the HF fast-tokenizer format, which
`transformers.AutoTokenizer` loads), the family's native files, and `bertkit_tokenizer.json` naming the
family and its special tokens. A plain Hugging Face directory with only `vocab.txt` (classic BERT) loads too.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from bertkit.errors import BertkitError

BERTKIT_TOKENIZER_FILE = "bertkit_tokenizer.json"
ROLES = ("pad", "unk", "cls", "sep", "mask")


@dataclass(frozen=True)
class SpecialTokens:
    pad: str
    unk: str
    cls: str
    sep: str
    mask: str

    def as_list(self) -> list[str]:
        return [getattr(self, role) for role in ROLES]


WORDPIECE_SPECIALS = SpecialTokens(pad="[PAD]", unk="[UNK]", cls="[CLS]", sep="[SEP]", mask="[MASK]")
BBPE_SPECIALS = SpecialTokens(pad="<pad>", unk="<unk>", cls="<s>", sep="</s>", mask="<mask>")


class Tokenizer:
    """A loaded tokenizer: ids of the special tokens, batch encoding without per-line Python loops."""

    def __init__(self, backend, kind: str, specials: SpecialTokens, path: Path | None = None) -> None:
        self.backend = backend  # tokenizers.Tokenizer
        self.kind = kind
        self.specials = specials
        self.path = path
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
        """Ids without special tokens, for many texts at once (parallel inside `tokenizers`)."""
        return [enc.ids for enc in self.backend.encode_batch(texts, add_special_tokens=False)]

    def encode_batch_with_words(self, texts: list[str]) -> tuple[list[list[int]], list[list[int | None]]]:
        """Ids plus, per token, the index of the word it belongs to (for whole-word masking)."""
        encodings = self.backend.encode_batch(texts, add_special_tokens=False)
        return [e.ids for e in encodings], [e.word_ids for e in encodings]

    def encode(self, text: str, pair: str | None = None, add_special_tokens: bool = True) -> list[int]:
        return self.backend.encode(text, pair, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(ids, skip_special_tokens=skip_special_tokens)

    def id_to_token(self, token_id: int) -> str | None:
        return self.backend.id_to_token(token_id)

    def fingerprint(self) -> str:
        """A hash of the full tokenizer definition, recorded in corpus manifests and checkpoints."""
        return hashlib.sha256(self.backend.to_str().encode("utf-8")).hexdigest()[:16]

    def save(self, directory: Path) -> None:
        """Write tokenizer.json, the native vocab file, and the configs transformers looks for."""
        directory.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(directory / "tokenizer.json"))
        if self.kind == "wordpiece":
            vocab = self.backend.get_vocab(with_added_tokens=True)
            ordered = sorted(vocab.items(), key=lambda item: item[1])
            (directory / "vocab.txt").write_text("".join(f"{tok}\n" for tok, _ in ordered), encoding="utf-8")
        meta = {"kind": self.kind, "special_tokens": {r: getattr(self.specials, r) for r in ROLES}}
        (directory / BERTKIT_TOKENIZER_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        hf_config = {
            "tokenizer_class": "BertTokenizerFast" if self.kind == "wordpiece" else "PreTrainedTokenizerFast",
            "model_max_length": 512,
            **{f"{role}_token": getattr(self.specials, role) for role in ROLES},
        }
        if self.kind == "wordpiece":
            normalizer = json.loads(self.backend.to_str()).get("normalizer") or {}
            hf_config["do_lower_case"] = _normalizer_lowercases(normalizer)
        (directory / "tokenizer_config.json").write_text(json.dumps(hf_config, indent=2) + "\n", "utf-8")
        special_map = {f"{role}_token": getattr(self.specials, role) for role in ROLES}
        (directory / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2) + "\n", "utf-8")


def _normalizer_lowercases(normalizer: dict) -> bool:
    if normalizer.get("type") == "Sequence":
        return any(_normalizer_lowercases(n) for n in normalizer.get("normalizers", []))
    return normalizer.get("type") == "Lowercase" or bool(normalizer.get("lowercase", False))


def _guess_specials(backend) -> tuple[str, SpecialTokens]:
    if backend.token_to_id("[CLS]") is not None:
        return "wordpiece", WORDPIECE_SPECIALS
    if backend.token_to_id("<s>") is not None:
        return "bbpe", BBPE_SPECIALS
    raise BertkitError("cannot tell this tokenizer's special tokens: it has neither [CLS] nor <s>")


def _wordpiece_from_vocab(vocab_file: Path, lowercase: bool):
    """Classic BERT directories ship only vocab.txt: rebuild BERT's exact pipeline around it."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, normalizers, pre_tokenizers, processors

    backend = HFTokenizer(models.WordPiece.from_file(str(vocab_file), unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase
    )
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    cls_id, sep_id = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    if cls_id is not None and sep_id is not None:
        backend.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
        )
    return backend


def load_tokenizer(directory: Path | str) -> Tokenizer:
    """Load a bertkit tokenizer directory or a Hugging Face one (tokenizer.json or vocab.txt)."""
    from tokenizers import Tokenizer as HFTokenizer

    directory = Path(directory)
    if not directory.is_dir():
        raise BertkitError(f"tokenizer directory not found: {directory}")
    meta_file = directory / BERTKIT_TOKENIZER_FILE
    hf_config_file = directory / "tokenizer_config.json"
    hf_config = json.loads(hf_config_file.read_text("utf-8")) if hf_config_file.is_file() else {}
    if (directory / "tokenizer.json").is_file():
        try:
            backend = HFTokenizer.from_file(str(directory / "tokenizer.json"))
        except Exception as err:  # the Rust library raises a bare Exception on a malformed file
            raise BertkitError(f"{directory / 'tokenizer.json'} is not a valid tokenizer file: {err}") from None
    elif (directory / "vocab.txt").is_file():
        backend = _wordpiece_from_vocab(directory / "vocab.txt", bool(hf_config.get("do_lower_case", True)))
    else:
        raise BertkitError(
            f"{directory} is not a tokenizer directory: it has neither tokenizer.json nor vocab.txt "
            "(train one with `bertkit tokenize train`)"
        )
    if meta_file.is_file():
        meta = json.loads(meta_file.read_text("utf-8"))
        specials = SpecialTokens(**meta["special_tokens"])
        kind = meta["kind"]
    else:
        kind, specials = _guess_specials(backend)
    # Padding and truncation would silently change what `encode` returns; bertkit pads in the collator.
    backend.no_padding()
    backend.no_truncation()
    return Tokenizer(backend, kind, specials, directory)
