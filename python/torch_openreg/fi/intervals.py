"""Confidence intervals of outcome rates, shared by the summary (summary.py)
and its plots (plots.py)."""

import math

__all__ = ["Z95", "wilson"]

Z95 = 1.959963984540054  # the 97.5% quantile of the normal distribution


def wilson(successes, trials, z=Z95):
    """The Wilson score interval (low, high) of a binomial proportion;
    (0, 1) without trials. Unlike the normal approximation it stays inside
    [0, 1] and is sound for rates near 0 or 1 and small samples."""
    if trials == 0:
        return 0.0, 1.0
    rate = successes / trials
    denominator = 1 + z * z / trials
    center = (rate + z * z / (2 * trials)) / denominator
    half = z / denominator * math.sqrt(
        rate * (1 - rate) / trials + z * z / (4 * trials * trials))
    # The interval contains the rate; clamping keeps rounding at rates of
    # 0 and 1 from putting a bound a hair on the wrong side of it.
    return (min(rate, max(0.0, center - half)),
            max(rate, min(1.0, center + half)))
