"""Report layer: figures and per-head reports built from the analyses' tidy tables.

matplotlib/seaborn are imported lazily inside functions (Agg backend)."""
