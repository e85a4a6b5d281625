"""Fine-tuning tasks: data, heads and metrics."""
