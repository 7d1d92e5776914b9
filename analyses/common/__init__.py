"""Shared foundations of the analyses: bootstrap intervals, token/word score types, metrics and targets."""
