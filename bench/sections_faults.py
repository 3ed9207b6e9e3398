"""Fault injection's cost when nothing fires: small-op throughput with
faults armed that never match, against the same ops with none armed
(docs/FAULT_INJECTION.md). The issue's bar is >= 0.99x throughput, i.e. a
time ratio <= 1.01x within noise."""

from timing import compare, per_call

SMALL = 1024


def _armed_vs_idle(torch, name, op, specs, repeats):
    faults = torch.openreg.faults

    def idle():
        op()

    def armed():
        op()

    def measure(fn, count, sync):
        ids = [faults.arm(model, **trigger) for model, trigger in specs] \
            if fn is armed else []
        try:
            return per_call(fn, count, sync)
        finally:
            if ids:
                faults.disarm(ids)

    return [(name, "no fault") + compare(
        idle, armed, repeats, rounds=15, measure=measure,
        baseline_sync=torch.openreg.synchronize,
        device_sync=torch.openreg.synchronize)]


def fault_hook_cost(torch, scale):
    repeats = int(500 * scale) or 1
    x = torch.randn(SMALL, device="openreg")
    faults = torch.openreg.faults
    never = (faults.kernel_failure(), {"op": "aten::never_called"})
    many = [(faults.corrupt_output(), {"op": f"aten::*never{i}*"})
            for i in range(8)]
    rows = []
    rows += _armed_vs_idle(torch, "add, 1 fault armed (never matches)",
                           lambda: torch.add(x, x), [never], repeats)
    rows += _armed_vs_idle(torch, "add, 8 glob faults armed (never match)",
                           lambda: torch.add(x, x), many, repeats)
    rows += _armed_vs_idle(torch, "relu, 1 fault armed (never matches)",
                           lambda: torch.relu(x), [never], repeats)
    return rows


SECTIONS = [fault_hook_cost]
