"""Tests of the scripts under ``tools/``."""
