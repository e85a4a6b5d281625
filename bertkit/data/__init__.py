"""Real sample data obtainable without the network, for the quickstart, tests and benchmarks."""
