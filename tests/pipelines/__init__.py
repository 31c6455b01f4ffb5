"""Pipelines in the style of public TF TTS recipes, for `perfsuite diagnose --pipeline` tests."""
