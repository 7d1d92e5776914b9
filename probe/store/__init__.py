"""Captured attention on disk: the store directory (writer and reader), its schema, the
one-writer lock, and verify/repair."""
