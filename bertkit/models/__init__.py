"""Model code: forward passes only. No losses, no I/O, no distributed code.

attention.py    multi-head self-attention (SDPA, or the explicit path that returns scores and probabilities)
layers.py       embeddings, feed-forward, encoder layer (pre/post-LN, GeLU variants, dropout), the attention choice
repeatable.py   gathers whose backward gives the same bits in every run on CUDA
unpad.py        unpadding: pack a batch's real tokens, varlen attention by cu_seqlens, re-pad (any family reuses it)
block_sparse.py BigBird's block-sparse self-attention (model.attention=block_sparse), linear in the length
bert.py         the encoder every family shares (ALBERT's factorized embeddings and layer sharing included)
heads.py        MLM, NSP/SOP, RTD and SBO heads, and `gather_rows` (the rows a sparse head reads)
electra.py      generator + discriminator with shared embeddings
xlnet.py        XLNet: relative positions and segments, two-stream attention, the tied LM head
pretraining.py  encoder + heads as one module per recipe; parameter counts on the meta device
pooling.py      sentence embeddings: mean over the real tokens, an encoder that returns mean and [CLS] pooled
with_heads.py   an encoder with optional MLM and classifier heads whose output carries what distillation compares
"""
