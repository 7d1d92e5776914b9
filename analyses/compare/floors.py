"""The practical floors a change must clear to be flagged, with their reasons.

A change is *flagged* when it is significant after Benjamini–Hochberg across heads and
its size is at least the measure's floor: a statistically sure but negligible change
(a fine-tune nudging every head by 0.1% of attention) is not what a reader looks for.
"""

from __future__ import annotations

#: the JSD (bits, in [0, 1]) a head's pattern must move by; two rows that share 95% of
#: their mass and move the other 5% to one other key are about 0.02 bits apart
JSD_FLOOR = 0.02
#: attention shares and share-like scores (prev, to_cls, induction, positional_share, …):
#: 5 points of attention mass, the resolution at which Clark et al. (2019) read their
#: shares (their heads sit at 50%, 90% …)
SHARE_FLOOR = 0.05
#: the entropy ratio (row entropy over a uniform row's): the same 5 points
RATIO_FLOOR = 0.05
#: the in-context-learning score (nats): a tenth of a nat between late and early loss
ICL_FLOOR = 0.1

FLOOR_SOURCES = {
    "jsd": "0.02 bits: 5% of a row's mass moved to another key",
    "share": "5 points of attention mass (the resolution of Clark et al. 2019's shares)",
    "ratio": "5 points of the entropy ratio",
    "necessity": "the objective's practical floor (probe.analyses.claims.thresholds.MIN_EFFECT)",
    "icl": "0.1 nats between late and early loss",
}
