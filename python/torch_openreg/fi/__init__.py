"""Fault-injection campaigns on whole programs (`openreg-fi`), and the small
API a program uses to report its results to a campaign.

A program run by `openreg-fi` may report the values that define its output
and the errors it detects itself:

    import torch_openreg.fi as fi

    fi.report("logits", logits)          # floats, lists, tensors, strings
    if not torch.isfinite(loss):
        fi.detected("non-finite loss")    # the run counts as DUE

Both append JSON lines to the file named by $OPENREG_FI_RESULT, which the
campaign sets for each run; without it (a program run on its own) they do
nothing. A name reported several times (a loss per step) is compared as
the sequence of its values. Under torchrun every line carries the job's
attempt ($TORCHELASTIC_RESTART_COUNT): a job restarted after a failure is
judged by its last attempt's reports (so report final values, such as the
final loss and weights, once), and counts as Recovered when they match.
See docs/FAULT_INJECTION.md.
"""

import json
import os

__all__ = ["ATTEMPT_ENV", "RESULT_ENV", "RUN_ENV", "detected", "report", "to_json_value"]

RESULT_ENV = "OPENREG_FI_RESULT"
# The run being executed: "golden-0", "golden-1", ... or the run index.
RUN_ENV = "OPENREG_FI_RUN"
# Set by torchrun in every worker: 0 first, +1 on each restart.
ATTEMPT_ENV = "TORCHELASTIC_RESTART_COUNT"


def to_json_value(value):
    """`value` as plain JSON data: tensors (any device) and numpy arrays
    become nested lists (complex numbers as [real, imag] pairs), tuples
    become lists, dict keys become strings."""
    if hasattr(value, "detach") and hasattr(value, "tolist"):  # a tensor
        import torch

        tensor = value.detach().cpu()
        if tensor.layout != torch.strided:
            tensor = tensor.to_dense()
        if tensor.is_quantized:
            tensor = tensor.dequantize()
        if tensor.is_complex():
            tensor = torch.view_as_real(tensor)
        return tensor.tolist()
    if hasattr(value, "tolist") and hasattr(value, "dtype"):  # numpy
        return to_json_value(value.tolist())
    if isinstance(value, complex):
        return [value.real, value.imag]
    if isinstance(value, dict):
        return {str(key): to_json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_value(item) for item in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "__float__"):  # numpy scalars, Decimal, ...
        return float(value)
    raise TypeError(
        f"torch_openreg.fi.report: cannot report a {type(value).__name__}")


def _append(entry):
    path = os.environ.get(RESULT_ENV)
    if not path:
        return
    attempt = os.environ.get(ATTEMPT_ENV)
    if attempt:
        entry = {**entry, "attempt": int(attempt)}
    # One write per line, flushed at once: a run that crashes later keeps
    # what it reported before.
    with open(path, "a") as result:
        result.write(json.dumps(entry) + "\n")


def report(name, value):
    """Reports one output value of the program under `name` (a str). The
    campaign compares every reported value with the fault-free run's."""
    if not isinstance(name, str):
        raise TypeError("torch_openreg.fi.report: name must be a str")
    _append({"name": name, "value": to_json_value(value)})


def detected(message):
    """Reports that the program detected an error itself (a NaN loss, a
    failed checksum): the run is classified DUE (detected unrecoverable
    error) whatever its exit status and output."""
    _append({"detected": str(message)})
