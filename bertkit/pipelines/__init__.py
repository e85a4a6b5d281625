"""The library calls behind the training subcommands; the CLI only parses arguments and calls these."""
