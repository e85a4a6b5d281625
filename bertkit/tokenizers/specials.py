"""Special tokens of each tokenizer family, and how to recognise them in a directory bertkit did not write."""

from __future__ import annotations

from dataclasses import dataclass

ROLES = ("pad", "unk", "cls", "sep", "mask")
KINDS: tuple[str, ...] = ("wordpiece", "bbpe", "sentencepiece-unigram", "sentencepiece-bpe")


@dataclass(frozen=True)
class SpecialTokens:
    pad: str
    unk: str
    cls: str
    sep: str
    mask: str

    def as_list(self) -> list[str]:
        return [getattr(self, role) for role in ROLES]

    def as_dict(self) -> dict[str, str]:
        return {role: getattr(self, role) for role in ROLES}


# BERT, ELECTRA, DistilBERT, TinyBERT: ids 0..4 in this order, as in bert-base-uncased's tokenizer.json.
WORDPIECE_SPECIALS = SpecialTokens(pad="[PAD]", unk="[UNK]", cls="[CLS]", sep="[SEP]", mask="[MASK]")
# RoBERTa: <s>=0 <pad>=1 </s>=2 <unk>=3; <mask> swallows the space before it (see bbpe.py).
BBPE_SPECIALS = SpecialTokens(pad="<pad>", unk="<unk>", cls="<s>", sep="</s>", mask="<mask>")
# ALBERT: <pad>=0 <unk>=1 [CLS]=2 [SEP]=3 [MASK]=4.
SPM_SPECIALS = SpecialTokens(pad="<pad>", unk="<unk>", cls="[CLS]", sep="[SEP]", mask="[MASK]")

FAMILY_SPECIALS = {
    "wordpiece": WORDPIECE_SPECIALS,
    "bbpe": BBPE_SPECIALS,
    "sentencepiece-unigram": SPM_SPECIALS,
    "sentencepiece-bpe": SPM_SPECIALS,
}

# For a foreign directory without a special-tokens map: the spellings the BERT families use, in order of preference.
_CANDIDATES = {
    "pad": ("[PAD]", "<pad>"),
    "unk": ("[UNK]", "<unk>"),
    "cls": ("[CLS]", "<s>"),
    "sep": ("[SEP]", "</s>"),
    "mask": ("[MASK]", "<mask>"),
}


def _token_text(value: object) -> str | None:
    """special_tokens_map.json holds either a string or an AddedToken dict with a 'content' field."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def guess_specials(has_token, declared: dict) -> tuple[SpecialTokens | None, list[str]]:
    """Pick each role's token: the one the directory declares (tokenizer_config / special_tokens_map) if the
    vocabulary has it, else the first family spelling the vocabulary has. Returns the roles it could not fill."""
    chosen: dict[str, str] = {}
    missing: list[str] = []
    for role in ROLES:
        declared_token = _token_text(declared.get(f"{role}_token"))
        options = ((declared_token,) if declared_token else ()) + _CANDIDATES[role]
        found = next((tok for tok in options if has_token(tok)), None)
        if found is None:
            missing.append(role)
        else:
            chosen[role] = found
    return (SpecialTokens(**chosen) if not missing else None), missing
