"""One module per experiment tracker (bertkit/engine/tracking.py drives them); each imports its package lazily.
base.py holds what they and tracking.py share (RunInfo, the Backend protocol)."""
