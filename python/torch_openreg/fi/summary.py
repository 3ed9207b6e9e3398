"""The report step (`openreg-fi report`): outcome rates with 95% Wilson score intervals, overall,
per fault model, per op and per bit position, as text (summary.txt), JSON
(summary.json) and plots (plots.py)."""

import json

from torch_openreg.fi.classify import OUTCOMES
from torch_openreg.fi.intervals import wilson

__all__ = ["format_summary", "summarize", "write_report"]


def target_label(record):
    """The op a run's fault targeted (its kind for non-kernel commands)."""
    trigger = record["fault"]["trigger"]
    return trigger.get("op") or trigger.get("kind", "?")


def flipped_bit(record):
    """The highest bit the run's fault flipped, from the fault log (None
    if it flipped none)."""
    bits = [bit for fired in record.get("records", [])
            for bit in fired.get("bits", [])]
    return max(bits) if bits else None


def _counts(records):
    counts = {outcome: 0 for outcome in OUTCOMES}
    for record in records:
        counts[record["outcome"]] += 1
    return counts


def _grouped(records, key):
    groups = {}
    for record in records:
        label = key(record)
        if label is not None:
            groups.setdefault(label, []).append(record)
    return {label: {"runs": len(group), **_counts(group)}
            for label, group in groups.items()}


def summarize(records):
    """The summary of run records (dict, as in summary.json)."""
    runs = len(records)
    outcomes = {}
    for outcome, count in _counts(records).items():
        low, high = wilson(count, runs)
        outcomes[outcome] = {"count": count,
                             "rate": count / runs if runs else 0.0,
                             "ci95": [low, high]}
    fired = {"yes": 0, "no": 0, "unknown": 0}
    for record in records:
        fired[{True: "yes", False: "no", None: "unknown"}[record["fired"]]] += 1
    by_bit = _grouped(records, flipped_bit)
    for counts in by_bit.values():
        counts["sdc_ci95"] = list(wilson(counts["SDC"], counts["runs"]))
    timed = [record for record in records if "overhead" in record]
    return {
        "runs": runs,
        "outcomes": outcomes,
        "fired": fired,
        "by_model": _grouped(records, lambda record: record["model"]),
        "by_op": _grouped(records, target_label),
        "by_bit": {str(bit): by_bit[bit] for bit in sorted(by_bit)},
        "mean_seconds": sum(r["seconds"] for r in records) / runs if runs
        else 0.0,
        "mean_overhead": sum(r["overhead"] for r in timed) / len(timed)
        if timed else 0.0,
    }


def _table(title, groups, limit=None):
    rows = sorted(groups.items(), key=lambda item: (-item[1]["runs"],
                                                    str(item[0])))
    hidden = len(rows) - limit if limit and len(rows) > limit else 0
    rows = rows[:limit] if limit else rows
    width = max([len(title)] + [len(str(label)) for label, _ in rows])
    lines = [f"{title:<{width}}  {'runs':>5}" +
             "".join(f"  {outcome:>{max(6, len(outcome))}}"
                     for outcome in OUTCOMES)]
    for label, counts in rows:
        lines.append(f"{str(label):<{width}}  {counts['runs']:>5}" +
                     "".join(f"  {counts[o]:>{max(6, len(o))}}"
                             for o in OUTCOMES))
    if hidden:
        lines.append(f"({hidden} more in summary.json)")
    return lines


def format_summary(summary, golden=None):
    """The summary as a text report."""
    lines = []
    if golden is not None:
        kernels = sum(entry["count"] for entry in golden["profile"]
                      if entry["kind"] == "kernel")
        lines.append(
            f"golden run: {max(golden['seconds']):.2f} s, {kernels} kernel "
            f"launches; daemon start {max(golden['daemon_start_seconds']):.3f}"
            f" s; timeout {golden['timeout']} s")
    fired = summary["fired"]
    lines.append(f"{summary['runs']} runs; the fault fired in {fired['yes']}, "
                 f"never in {fired['no']}, unknown in {fired['unknown']}; "
                 f"per run: program {summary['mean_seconds']:.3f} s, "
                 f"overhead {summary['mean_overhead']:.3f} s")
    lines.append("")
    lines.append(f"{'outcome':<9}  {'runs':>5}  {'rate':>6}  95% CI")
    for outcome, entry in summary["outcomes"].items():
        low, high = entry["ci95"]
        lines.append(f"{outcome:<9}  {entry['count']:>5}  "
                     f"{100 * entry['rate']:>5.1f}%  "
                     f"{100 * low:.1f}% - {100 * high:.1f}%")
    lines += [""] + _table("model", summary["by_model"])
    lines += [""] + _table("op", summary["by_op"], limit=20)
    if summary["by_bit"]:
        lines += ["", "bit (highest flipped)  runs    SDC  SDC rate  95% CI"]
        for bit, counts in summary["by_bit"].items():
            low, high = counts["sdc_ci95"]
            rate = counts["SDC"] / counts["runs"]
            lines.append(f"{bit:>21}  {counts['runs']:>4}  {counts['SDC']:>5}"
                         f"  {100 * rate:>7.1f}%  {100 * low:.1f}% - "
                         f"{100 * high:.1f}%")
    return "\n".join(lines) + "\n"


def write_report(store, plots=True):
    """Writes summary.txt, summary.json and (with matplotlib) the plots of
    a campaign folder; returns the text."""
    records = store.read_runs()
    summary = summarize(records)
    text = format_summary(summary, store.load_golden())
    with open(store.file("summary.txt"), "w") as f:
        f.write(text)
    with open(store.file("summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    if plots and records:
        from torch_openreg.fi.plots import write_plots

        write_plots(summary, store.path)
    return text
