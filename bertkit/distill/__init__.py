"""Knowledge distillation (DistilBERT, TinyBERT, MiniLM): the frozen teacher, the student with its learned
projections, the layer maps and the losses (each a sum over its targets, with a count from the batch)."""
