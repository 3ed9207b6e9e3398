"""PNG plots of a campaign summary (matplotlib, no display needed):

    outcomes_by_model.png   outcome shares per fault model (stacked bars)
    outcomes_by_op.png      outcome shares per targeted op (at most 20)
    sdc_by_bit.png          SDC and DUE rates per flipped bit position,
                            with 95% Wilson intervals
"""

import os

from torch_openreg.fi.classify import OUTCOMES
from torch_openreg.fi.intervals import wilson

__all__ = ["write_plots"]

COLORS = {"Masked": "#8fbc8f", "Recovered": "#1f77b4", "SDC": "#d62728", "DUE": "#ff7f0e",
          "Hang": "#9467bd", "Crash": "#333333"}


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError("plots need matplotlib (`pip install matplotlib`, "
                           "or `make setup`); `openreg-fi report --no-plots` "
                           "writes the rest") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot


def _shares(pyplot, groups, title, path, limit=None):
    rows = sorted(groups.items(), key=lambda item: (-item[1]["runs"],
                                                    str(item[0])))[:limit]
    rows.reverse()  # the largest group on top
    labels = [f"{label} (n={counts['runs']})" for label, counts in rows]
    figure, axes = pyplot.subplots(
        figsize=(9, 1.2 + 0.35 * len(rows)), layout="constrained")
    left = [0.0] * len(rows)
    for outcome in OUTCOMES:
        shares = [counts[outcome] / counts["runs"] for _, counts in rows]
        axes.barh(labels, shares, left=left, color=COLORS[outcome],
                  label=outcome)
        left = [a + b for a, b in zip(left, shares)]
    axes.set_xlim(0, 1)
    axes.set_xlabel("share of runs")
    axes.set_title(title)
    axes.legend(ncol=len(OUTCOMES), loc="lower center",
                bbox_to_anchor=(0.5, 1.02 + 0.3 / max(len(rows), 1)),
                frameon=False, fontsize="small")
    figure.savefig(path, dpi=100)
    pyplot.close(figure)


def _bits(pyplot, by_bit, path):
    bits = sorted(by_bit, key=int)
    figure, axes = pyplot.subplots(figsize=(9, 4), layout="constrained")
    for outcome, offset in (("SDC", -0.15), ("DUE", 0.15)):
        rates, low, high = [], [], []
        for bit in bits:
            counts = by_bit[bit]
            rate = counts[outcome] / counts["runs"]
            interval = wilson(counts[outcome], counts["runs"])
            rates.append(rate)
            # Clamped: at rates of 0 and 1 rounding can put the interval's
            # bound a hair on the wrong side of the rate.
            low.append(max(0.0, rate - interval[0]))
            high.append(max(0.0, interval[1] - rate))
        axes.errorbar([int(bit) + offset for bit in bits], rates,
                      yerr=[low, high], fmt="o", capsize=3,
                      color=COLORS[outcome], label=outcome)
    axes.set_ylim(-0.02, 1.02)
    axes.set_xlabel("flipped bit (highest; 0 = least significant)")
    axes.set_ylabel("rate (95% Wilson interval)")
    axes.set_title("outcome rate by bit position")
    axes.legend()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)


def write_plots(summary, folder):
    """Writes the plots of `summary` into `folder`; returns their paths."""
    pyplot = _pyplot()
    paths = [os.path.join(folder, "outcomes_by_model.png"),
             os.path.join(folder, "outcomes_by_op.png")]
    _shares(pyplot, summary["by_model"], "outcomes by fault model", paths[0])
    _shares(pyplot, summary["by_op"], "outcomes by targeted op", paths[1],
            limit=20)
    if summary["by_bit"]:
        paths.append(os.path.join(folder, "sdc_by_bit.png"))
        _bits(pyplot, summary["by_bit"], paths[-1])
    return paths
