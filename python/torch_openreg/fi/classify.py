"""What happened in one run: Masked, Recovered, SDC, DUE, Hang or Crash.

A run's output is compared with the fault-free (golden) run's within a
tolerance: |run - golden| <= atol + rtol * |golden| for every number (NaN
equals NaN), everything else exactly. Outputs are either the values the
program reported (torch_openreg.fi.report), or text (stdout, a result
file) in which every number is compared with the tolerance and the text
between numbers exactly.
"""

import json
import math
import re
import signal

__all__ = ["OUTCOMES", "Output", "RunResult", "classify", "compare_outputs",
           "compare_text", "compare_values", "last_error_line",
           "last_exception", "read_output", "read_result_file",
           "signal_name"]

# In the order reports list them. Recovered: the output matches the golden
# run's after the job was restarted (torchrun --max-restarts) from a
# failure.
OUTCOMES = ("Masked", "Recovered", "SDC", "DUE", "Hang", "Crash")

# A number as Python, torch and numpy print them (the text around numbers
# is compared exactly).
_NUMBER = re.compile(
    r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?i:nan|inf(?:inity)?))")


class Output:
    """A program's output: `values` (name -> list of reported values) for
    reports, or `text`; `detected` lists the errors the program reported;
    `restarts` how many times torchrun restarted the job (its last
    attempt's number)."""

    def __init__(self, values=None, text=None, detected=(), restarts=0):
        self.values = values
        self.text = text
        self.detected = list(detected)
        self.restarts = restarts


class RunResult:
    """How a run's program ended."""

    def __init__(self, returncode, timed_out, seconds, output, error="",
                 exception=""):
        self.returncode = returncode  # negative: killed by that signal
        self.timed_out = timed_out
        self.seconds = seconds
        self.output = output          # an Output, or None if unreadable
        self.error = error            # the last line of its stderr
        # The last Python exception it printed ("RuntimeError: ..."), if any.
        self.exception = exception


def read_result_file(path):
    """(values, detected, restarts) from a $OPENREG_FI_RESULT file: the
    reports of the job's last attempt (restarts: its number, 0 without
    torchrun restarts); a missing file is an empty report, a torn last
    line (the program died writing it) is ignored."""
    entries = []
    try:
        with open(path) as result:
            lines = result.read().splitlines()
    except FileNotFoundError:
        lines = []
    for line in lines:
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    restarts = max((entry.get("attempt", 0) for entry in entries), default=0)
    values, detected = {}, []
    for entry in entries:
        if entry.get("attempt", 0) != restarts:
            continue
        if "detected" in entry:
            detected.append(entry["detected"])
        elif "name" in entry:
            values.setdefault(entry["name"], []).append(entry.get("value"))
    return values, detected, restarts


def read_output(compare, result_path, stdout_path, output_file):
    """The Output of a run: `compare` is "report", "stdout" or "file"
    (output_file's text; None if the program wrote none)."""
    values, detected, restarts = read_result_file(result_path)
    if compare == "report":
        return Output(values=values, detected=detected, restarts=restarts)
    path = stdout_path if compare == "stdout" else output_file
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        text = None
    return Output(text=text, detected=detected, restarts=restarts)


def _close(value, golden, rtol, atol):
    if math.isnan(golden) or math.isnan(value):
        return math.isnan(golden) and math.isnan(value)
    if math.isinf(golden) or math.isinf(value):
        return value == golden
    return abs(value - golden) <= atol + rtol * abs(golden)


def compare_values(value, golden, rtol, atol, where="value"):
    """None if `value` matches `golden` (nested JSON data), else a short
    description of the first difference."""
    if isinstance(golden, bool) or isinstance(value, bool):
        if value is golden:
            return None
    elif isinstance(golden, (int, float)) and isinstance(value, (int, float)):
        if _close(float(value), float(golden), rtol, atol):
            return None
    elif isinstance(golden, list) and isinstance(value, list):
        if len(value) != len(golden):
            return f"{where}: length {len(value)} != {len(golden)} (golden)"
        for index, (item, expected) in enumerate(zip(value, golden)):
            difference = compare_values(item, expected, rtol, atol,
                                        f"{where}[{index}]")
            if difference:
                return difference
        return None
    elif isinstance(golden, dict) and isinstance(value, dict):
        if sorted(value) != sorted(golden):
            return f"{where}: keys {sorted(value)} != {sorted(golden)} (golden)"
        for key in golden:
            difference = compare_values(value[key], golden[key], rtol, atol,
                                        f"{where}[{key!r}]")
            if difference:
                return difference
        return None
    elif value == golden:
        return None
    return f"{where}: {_short(value)} != {_short(golden)} (golden)"


def _short(value):
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def compare_text(text, golden, rtol, atol, where="output"):
    """None if `text` matches `golden` (numbers within the tolerance, the
    rest exactly), else a description of the first difference."""
    pieces, expected = _NUMBER.split(text), _NUMBER.split(golden)
    line = 1
    for index, (piece, reference) in enumerate(zip(pieces, expected)):
        is_number = index % 2 == 1
        if piece != reference and not (
                is_number and _close(float(piece), float(reference), rtol, atol)):
            return (f"{where} line {line}: {_short(piece)} != "
                    f"{_short(reference)} (golden)")
        line += reference.count("\n")
    if len(pieces) != len(expected):
        return f"{where}: {len(text)} characters != {len(golden)} (golden)"
    return None


def compare_outputs(output, golden, rtol, atol):
    """None if `output` matches the golden Output, else the difference."""
    if golden.values is not None:
        missing = [name for name in golden.values if name not in output.values]
        if missing:
            return f"not reported: {', '.join(missing)}"
        extra = [name for name in output.values if name not in golden.values]
        if extra:
            return f"reported, not in golden: {', '.join(extra)}"
        for name, values in golden.values.items():
            reported = output.values[name]
            if len(values) == 1 and len(reported) == 1:
                # Reported once: its elements are named name[i]...
                values, reported = values[0], reported[0]
            difference = compare_values(reported, values, rtol, atol, name)
            if difference:
                return difference
        return None
    if output.text is None:
        return "no output file"
    return compare_text(output.text, golden.text, rtol, atol)


def signal_name(returncode):
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def classify(result, golden, rtol=0.0, atol=0.0):
    """(outcome, detail) of a RunResult against the golden Output:
    Hang (timed out), Crash (killed by a signal), DUE (the program reported
    a detected error or exited with a nonzero status), else SDC if its
    output differs from the golden output, Recovered if it matches after
    torchrun restarted the job, Masked if it matches."""
    if result.timed_out:
        return "Hang", f"no exit within the timeout ({result.seconds:.1f} s)"
    if result.returncode < 0 and result.exception:
        # The program had already died of an exception; a signal while the
        # interpreter exits (a C++ thread torn down mid-exit, such as
        # PyTorch's autograd device threads after a failed backward) does
        # not make the detected error a crash.
        return "DUE", (f"{result.exception} (then "
                       f"{signal_name(result.returncode)} while exiting)")
    if result.returncode < 0:
        return "Crash", f"killed by {signal_name(result.returncode)}"
    if result.output.detected:
        return "DUE", f"detected: {result.output.detected[0]}"
    if result.returncode != 0:
        return "DUE", f"exit status {result.returncode}: {result.error}"
    difference = compare_outputs(result.output, golden, rtol, atol)
    if difference:
        return "SDC", difference
    if result.output.restarts:
        return "Recovered", (f"the golden output after {result.output.restarts}"
                             " restart(s)")
    return "Masked", ""


_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b.*")


def last_exception(path):
    """The exception line ("RuntimeError: ...") of the last Python traceback
    in a stderr file, or "" when it printed none."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 65536))
            lines = f.read().decode(errors="replace").splitlines()
    except FileNotFoundError:
        return ""
    if _TRACEBACK not in lines:
        return ""
    start = len(lines) - 1 - lines[::-1].index(_TRACEBACK)
    for line in lines[start + 1:]:
        if _EXCEPTION_LINE.match(line):
            return line.strip()[:500]
    return ""


def last_error_line(path):
    """The last non-blank line of a stderr file ("" if none)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 65536))
            lines = f.read().decode(errors="replace").splitlines()
    except FileNotFoundError:
        return ""
    for line in reversed(lines):
        if line.strip():
            return line.strip()[:500]
    return ""
