"""The top floor: the analysis registry, the report and the command line.

Imports only downwards (analyses, probe core, models); nothing below imports it.
"""
