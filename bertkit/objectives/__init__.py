"""Objectives turn a model's outputs and a batch into (loss, metrics). Models never compute losses."""
