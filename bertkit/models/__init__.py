"""Model code: forward passes only. No losses, no I/O, no distributed code."""
