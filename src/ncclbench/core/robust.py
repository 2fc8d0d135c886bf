"""Robust statistics' one constant, shared by the tools that judge spreads (health, tune, the gate).

The median absolute deviation of a normal distribution times MAD_TO_SIGMA is its standard
deviation (1 / Phi^-1(3/4) = 1.4826): the robust spread every verdict that uses a MAD reads.
"""

MAD_TO_SIGMA = 1.4826
