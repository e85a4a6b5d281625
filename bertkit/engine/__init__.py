"""The engine owns devices, precision, optimisation, checkpoints and the one training loop."""
