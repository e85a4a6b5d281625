"""One module per experiment tracker (bertkit/engine/tracking.py drives them); each imports its package lazily."""
