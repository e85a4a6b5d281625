"""Words that data augmentation never replaces.

TinyBERT's augmentation (data_augmentation.py) skips the English stop words (NLTK's list) and every word
that is not alphabetic. The stop words include the negations and their contraction stems ("not", "no",
"nor", "don", "didn", "wasn"...): replacing them flips the label of a sentiment or entailment example, and
the teacher's soft label then teaches the student the wrong class. Negations that NLTK's list lacks
("never", "nothing", "nobody", "neither", "cannot", "without", ...) are added for the same reason.
"""

from __future__ import annotations

# NLTK's English stop-word list (179 words), which TinyBERT's StopWordsList is.
_NLTK_ENGLISH = """
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves he him his
himself she she's her hers herself it it's its itself they them their theirs themselves what which who whom this
that that'll these those am is are was were be been being have has had having do does did doing a an the and but
if or because as until while of at by for with about against between into through during before after above
below to from up down in out on off over under again further then once here there when where why how all any
both each few more most other some such no nor not only own same so than too very s t can will just don don't
should should've now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn
hasn't haven haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn
wasn't weren weren't won won't wouldn wouldn't
"""

# Negations and negative quantifiers beyond NLTK's list: each one, replaced, can flip a label.
_NEGATIONS = """
never nothing nobody none neither nowhere cannot cant without hardly barely scarcely seldom rarely nope nah
dont didnt doesnt isnt wasnt werent wont wouldnt couldnt shouldnt arent aint hasnt havent hadnt
"""

STOP_WORDS: frozenset[str] = frozenset(_NLTK_ENGLISH.split()) | frozenset(_NEGATIONS.split())


def replaceable(word: str) -> bool:
    """TinyBERT's rule: only alphabetic words that are not stop words (nor negations) are replaced."""
    return word.isalpha() and word.casefold() not in STOP_WORDS
