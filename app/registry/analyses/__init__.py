"""The built-in analyses: each module declares ``ANALYSIS`` (or ``ANALYSES``) and is
found by :func:`probe.app.registry.registered` (modules starting with ``_`` are helpers).
Keep these modules light: the analysis code is imported inside ``run``."""
