"""Reading what users hand in: text, JSON lines, Parquet and datasets directories, compressed or not.

It sits below `tokenizers/`, `corpus/` and `tasks/`, which all read input files and none of which may
depend on another for it.
"""
