"""Scaled-dot-product attention, forward and backward: openreg's
overrideable fused route (CPU's flash kernel run in the daemon) against CPU
eager SDPA on the same inputs, in the same run."""

from timing import compare

# (batch, heads, sequence, head dim): a short and a long sequence.
SHAPES = [(4, 8, 128, 64), (1, 8, 1024, 64)]


def sdpa_forward_backward(torch, scale):
    functional = torch.nn.functional
    repeats = max(1, int(5 * scale))
    rows = []
    for shape in SHAPES:
        steps = {}
        for device in ("cpu", "openreg"):
            torch.manual_seed(0)
            q, k, v = [torch.randn(shape, device=device, requires_grad=True)
                       for _ in range(3)]

            def step(q=q, k=k, v=v):
                out = functional.scaled_dot_product_attention(
                    q, k, v, is_causal=True)
                out.backward(torch.ones_like(out))

            steps[device] = step
        name = "SDPA fwd+bwd causal B{} H{} L{} D{}".format(*shape)
        rows.append((name, "CPU eager") + compare(
            steps["cpu"], steps["openreg"], repeats,
            device_sync=torch.openreg.synchronize))
    return rows


SECTIONS = [sdpa_forward_backward]
