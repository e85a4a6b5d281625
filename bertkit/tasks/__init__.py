"""Fine-tuning tasks: data, heads and metrics, and the fine-tuned task models that predict and export build
(architectures.py)."""
