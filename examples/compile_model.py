"""torch.compile on openreg (docs/COMPILE.md): trains a small transformer
with its forward and loss compiled by Inductor, whose fused kernels the
daemon loads as modules and runs on device memory, next to the same model
trained eagerly on CPU. Prints each step's two losses, the compiled
kernels the daemon ran (from its cost profile), how many modules this
process loaded, and the time per step of both; exits non-zero if the
losses part by more than 1e-4.

    python examples/compile_model.py [--steps 10] [--daemon-socket PATH]

Without --daemon-socket it starts a private daemon and stops it by pid.
"""

import argparse
import contextlib
import copy
import os
import sys
import time


def build_model(torch):
    nn = torch.nn

    class TinyTransformer(nn.Module):
        def __init__(self, vocab=64, width=32, heads=4):
            super().__init__()
            self.heads = heads
            self.embedding = nn.Embedding(vocab, width)
            self.norm = nn.LayerNorm(width)
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                     nn.Linear(4 * width, width))
            self.head = nn.Linear(width, vocab)

        def forward(self, tokens):
            x = self.embedding(tokens)
            batch, length, width = x.shape
            q, k, v = self.qkv(self.norm(x)).split(width, dim=-1)
            q, k, v = [t.view(batch, length, self.heads, -1).transpose(1, 2)
                       for t in (q, k, v)]
            attended = nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True)
            x = x + self.proj(attended.transpose(1, 2).reshape(x.shape))
            return self.head(x + self.mlp(x))

    return TinyTransformer()


def loss_of(model, tokens, targets):
    import torch
    logits = model(tokens)
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1),
                                             targets.flatten())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--daemon-socket", help="use this running daemon")
    args = parser.parse_args()
    if args.daemon_socket:
        os.environ["OPENREG_DAEMON_SOCKET"] = args.daemon_socket
        daemon = contextlib.nullcontext()
    else:
        from torch_openreg.testing import Daemon
        daemon = Daemon(devices=1)
    with daemon as running:
        if running is not None:
            running.use()
        return train_and_compare(args.steps)


def train_and_compare(steps):
    import torch
    torch.manual_seed(0)
    reference = build_model(torch)
    model = copy.deepcopy(reference).to("openreg")
    batches = [(torch.randint(0, 64, (4, 16)), torch.randint(0, 64, (4, 16)))
               for _ in range(steps)]
    cpu_optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    compiled_loss = torch.compile(loss_of)

    cpu_seconds = openreg_seconds = 0.0
    worst = 0.0
    with torch.openreg.command_costs() as costs:
        for index, (tokens, targets) in enumerate(batches):
            start = time.perf_counter()
            cpu_optimizer.zero_grad()
            cpu_loss = loss_of(reference, tokens, targets)
            cpu_loss.backward()
            cpu_optimizer.step()
            cpu_seconds += time.perf_counter() - start

            start = time.perf_counter()
            optimizer.zero_grad()
            loss = compiled_loss(model, tokens.to("openreg"),
                                 targets.to("openreg"))
            loss.backward()
            optimizer.step()
            loss = loss.item()
            openreg_seconds += time.perf_counter() - start
            worst = max(worst, abs(loss - cpu_loss.item()))
            print(f"step {index:2d}: loss {loss:.6f} (compiled, openreg)  "
                  f"{cpu_loss.item():.6f} (eager, CPU)")
    fused = sorted({op["op"] for op in costs.ops
                    if op["op"].startswith("cpp_fused_")})
    sessions = [s for s in torch.openreg.daemon_stats()["sessions"]
                if s["pid"] == os.getpid()]
    print(f"compiled kernels the daemon ran: {len(fused)}")
    for name in fused:
        print(f"  {name}")
    print(f"modules this process loaded into the daemon: "
          f"{sessions[0].get('modules', 0)}")
    # The first step includes compiling (forward and backward).
    print(f"per step: {openreg_seconds / steps * 1e3:.1f} ms compiled on "
          f"openreg (first step compiles), {cpu_seconds / steps * 1e3:.1f} "
          "ms eager on CPU")
    if worst > 1e-4:
        print(f"losses part by {worst:.2e} (more than 1e-4)")
        return 1
    print(f"losses agree within {worst:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
