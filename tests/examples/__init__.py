"""Tests of the scripts under ``examples/``."""
