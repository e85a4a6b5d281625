"""bertkit: raw text to a pretrained, distilled and fine-tuned BERT-family encoder.

Importing the package is cheap on purpose (no torch): `bertkit --help` must answer instantly.
"""

__version__ = "0.1.0"
