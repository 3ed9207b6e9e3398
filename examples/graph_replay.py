"""Captures a small model's training step once and replays it
(docs/GRAPHS.md): warm up on a side stream, capture with
torch.openreg.graph (static inputs, capturable Adam), then feed each batch
by copying into the static input and replaying. Prints each step's loss
next to the same step run eagerly, and the time per step of both.

    python examples/graph_replay.py [STEPS]
"""

import sys
import time

import torch


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 1)).to("openreg")


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    batches = [(torch.randn(16, 32), torch.randn(16, 1)) for _ in range(steps)]
    eager, graphed = make_model(), make_model()
    eager_optimizer = torch.optim.Adam(eager.parameters(), lr=1e-2)
    optimizer = torch.optim.Adam(graphed.parameters(), lr=1e-2,
                                 capturable=True)
    static_x = torch.zeros(16, 32, device="openreg")
    static_y = torch.zeros(16, 1, device="openreg")

    def step(model, optimizer, x, y):
        optimizer.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    # Warm-up: every op signature once, and the optimizer's state, outside
    # the capture; then back to the initial weights and an empty state.
    initial = {k: v.clone() for k, v in graphed.state_dict().items()}
    side = torch.openreg.Stream()
    side.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(side):
        for _ in range(2):
            step(graphed, optimizer, static_x, static_y)
    torch.openreg.current_stream().wait_stream(side)
    graph = torch.openreg.OpenRegGraph()
    with torch.openreg.graph(graph):
        static_loss = step(graphed, optimizer, static_x, static_y)
    graphed.load_state_dict(initial)
    for state in optimizer.state.values():
        for value in state.values():
            value.zero_()

    eager_seconds = graph_seconds = 0.0
    for index, (x, y) in enumerate(batches):
        start = time.perf_counter()
        eager_loss = step(eager, eager_optimizer, x.to("openreg"),
                          y.to("openreg")).item()
        eager_seconds += time.perf_counter() - start
        start = time.perf_counter()
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
        graph_loss = static_loss.item()
        graph_seconds += time.perf_counter() - start
        if index % 5 == 0 or index == steps - 1:
            print(f"step {index:3d}  eager loss {eager_loss:.6f}  "
                  f"replayed loss {graph_loss:.6f}")
        if abs(eager_loss - graph_loss) > 1e-4 * max(1.0, abs(eager_loss)):
            sys.exit(f"step {index}: the replayed step's loss {graph_loss} "
                     f"differs from eager's {eager_loss}")
    print(f"per step: eager {eager_seconds / steps * 1e3:.2f} ms, "
          f"replayed {graph_seconds / steps * 1e3:.2f} ms")
    print("graph_replay: OK")


if __name__ == "__main__":
    main()
