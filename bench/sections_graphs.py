"""Graph capture and replay (docs/GRAPHS.md), in alternating rounds of the
same run: a chain of 100 small elementwise ops replayed against CPU eager
and openreg eager; greedy decoding of a tiny GPT-like model (16 tokens,
the decode step replayed) and a small MLP's training step (forward,
backward, capturable Adam) replayed, against CPU eager; the model
section's transformer and CNN steps replayed, against CPU eager and
openreg eager (how fast the daemon's kernels run the step when the
client does not feed it op by op); what a capture
costs per recorded command; and the daemon's CPU per recorded command on
replay against its CPU per command in eager mode; and, for the model
steps, the daemon's kernel time per step eager against replayed, by op,
beside CPU eager's time in the same ops. The issue's bars: the
chain >= 5x the throughput of CPU eager and of openreg eager (time ratio
<= 0.2x), decoding <= 1x, the training step <= 0.5x."""

import ctypes
import statistics
import time

from sections_models import _daemon_pid, _process_cpu, _workloads

ROUNDS = 5
CHAIN = 100


def _time(fn, repeats, sync=None):
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    if sync is not None:
        sync()
    return (time.perf_counter() - start) / repeats


def _warm_up(torch, fn):
    side = torch.openreg.Stream()
    side.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(side):
        for _ in range(2):
            fn()
    torch.openreg.current_stream().wait_stream(side)
    torch.openreg.synchronize()


def _capture(torch, fn):
    graph = torch.openreg.OpenRegGraph()
    with torch.openreg.graph(graph):
        fn()
    return graph


def _release_openmp_workers():
    """Ends the spin of this process's OpenMP workers (libgomp keeps them
    spinning for milliseconds after a parallel region; OpenMP 5's
    omp_pause_resource_all, soft: they exit, and the next parallel region
    starts them again)."""
    pause = getattr(ctypes.CDLL(None), "omp_pause_resource_all", None)
    if pause is not None:
        pause(1)  # omp_pause_soft


def _alternate(rounds, *timers):
    """Median over rounds of each timer, the timers taking turns. Each
    turn first runs its timer once untimed: on 2 cores, a side's first
    milliseconds after the other side's 2-thread work are slow (a
    replayed MLP step took 350-540 us in the 40 replays after CPU eager
    steps, 180-210 us after 40 more; CPU eager's step 430-530 us after
    replays, 310-330 us after a warm turn). And each turn ends by
    releasing this process's OpenMP workers: after a CPU eager turn they
    went on spinning through the next side's turn, warm turn included
    (this process spent 33-106 us of CPU per replayed MLP step after CPU
    eager steps, 2 us without them; the replay took 190-270 us against
    160 us). Both sides are timed as a loop that keeps running sees
    them; the workers' restart falls in the untimed turn."""
    samples = [[] for _ in timers]
    for _ in range(rounds):
        for sample, timer in zip(samples, timers):
            timer()
            sample.append(timer())
            _release_openmp_workers()
    return [statistics.median(sample) for sample in samples]


def _chain_of(x):
    for _ in range(CHAIN // 2):
        x = x * 1.0001 + 0.001
    return x


def graph_chain(torch, scale):
    repeats = max(5, int(50 * scale))
    sync = torch.openreg.synchronize
    cpu_input = torch.randn(1000)
    device_input = cpu_input.to("openreg")
    _warm_up(torch, lambda: _chain_of(device_input))
    graph = _capture(torch, lambda: _chain_of(device_input))
    cpu, eager, replay = _alternate(
        ROUNDS,
        lambda: _time(lambda: _chain_of(cpu_input), repeats),
        lambda: _time(lambda: _chain_of(device_input), repeats, sync),
        lambda: _time(graph.replay, repeats, sync))
    return [(f"graph: {CHAIN}-op chain (1000 floats) replay", "CPU eager",
             cpu, replay),
            (f"graph: {CHAIN}-op chain (1000 floats) replay", "op eager",
             eager, replay)]


def graph_costs(torch, scale):
    """Capture per recorded command (against an eager op's client time),
    and the daemon's CPU per command: replayed against eager."""
    repeats = max(5, int(50 * scale))
    sync = torch.openreg.synchronize
    device_input = torch.randn(1000, device="openreg")
    _warm_up(torch, lambda: _chain_of(device_input))
    captures = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        graph = _capture(torch, lambda: _chain_of(device_input))
        captures.append((time.perf_counter() - start) / CHAIN)
    eager_op = _time(lambda: _chain_of(device_input), repeats, sync) / CHAIN
    daemon = _daemon_pid()

    def daemon_cpu_per_command(fn):
        # Process CPU counts in clock ticks (10 ms): run for half a second
        # at least, or a replay's few milliseconds read as nothing.
        sync()
        before = _process_cpu(daemon)
        start = time.perf_counter()
        runs = 0
        while runs < repeats or time.perf_counter() - start < 0.5:
            for _ in range(10):
                fn()
            runs += 10
            sync()
        return (_process_cpu(daemon) - before) / (runs * CHAIN)

    eager_cpu, replay_cpu = _alternate(
        ROUNDS, lambda: daemon_cpu_per_command(lambda: _chain_of(device_input)),
        lambda: daemon_cpu_per_command(graph.replay))
    return [("graph: capture per recorded command", "eager op",
             eager_op, statistics.median(captures)),
            ("graph: daemon CPU per command, replayed", "eager",
             eager_cpu, replay_cpu)]


def _gpt_like(torch, vocab=96, width=32, heads=2, layers=2, context=24):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.attention = nn.MultiheadAttention(width, heads,
                                                   batch_first=True)
            self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(),
                                     nn.Linear(2 * width, width))

        def forward(self, x, mask):
            h = self.norm(x)
            x = x + self.attention(h, h, h, attn_mask=mask,
                                   need_weights=False)[0]
            return x + self.mlp(x)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(vocab, width)
            self.positions = nn.Parameter(torch.randn(1, context, width))
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.head = nn.Linear(width, vocab)
            self.register_buffer("mask", torch.triu(
                torch.full((context, context), float("-inf")), 1))

        def forward(self, buffer, position):
            x = self.tokens(buffer) + self.positions
            for block in self.blocks:
                x = block(x, self.mask)
            return self.head(x.index_select(1, position).squeeze(1))

    return Model().eval(), context


def graph_decode(torch, scale):
    """Greedy decoding, 16 new tokens after a 4-token prompt. The decode
    step reads the logits at the current position of a fixed-size token
    buffer, writes the argmax into the next position and advances the
    position, all on the device: no host sync per token."""
    torch.manual_seed(0)
    model, context = _gpt_like(torch)
    new_tokens = 16

    def make_state(device):
        buffer = torch.zeros(1, context, dtype=torch.long, device=device)
        buffer[0, :4] = torch.tensor([5, 17, 42, 7])
        return buffer, torch.tensor([3], device=device)

    def decode_step(model, buffer, position):
        logits = model(buffer, position)
        position.add_(1)
        buffer.index_copy_(1, position, logits.argmax(-1).view(1, 1))

    cpu_model = model
    device_model = _gpt_like(torch)[0].to("openreg")
    device_model.load_state_dict(cpu_model.state_dict())
    with torch.no_grad():
        cpu_state = make_state("cpu")
        device_state = make_state("openreg")
        _warm_up(torch, lambda: decode_step(device_model, *device_state))
        device_state = make_state("openreg")
        graph = _capture(torch,
                         lambda: decode_step(device_model, *device_state))

        def cpu_decode():
            buffer, position = make_state("cpu")
            cpu_state[0].copy_(buffer)
            cpu_state[1].copy_(position)
            for _ in range(new_tokens):
                decode_step(cpu_model, *cpu_state)
            return cpu_state[0]

        def device_decode():
            buffer, position = make_state("cpu")
            device_state[0].copy_(buffer)
            device_state[1].copy_(position)
            for _ in range(new_tokens):
                graph.replay()
            return device_state[0].cpu()  # the tokens, read once

        assert torch.equal(cpu_decode(), device_decode()), \
            "graph decoding differs from CPU eager's"
        cpu, replay = _alternate(ROUNDS, lambda: _time(cpu_decode, 3),
                                 lambda: _time(device_decode, 3))
    return [(f"graph: greedy decode, {new_tokens} tokens", "CPU eager", cpu,
             replay)]


def graph_training_step(torch, scale):
    """A small MLP's training step: CPU eager with Adam against the step
    replayed with capturable Adam."""
    torch.manual_seed(0)
    nn = torch.nn

    def mlp():
        return nn.Sequential(nn.Linear(64, 128), nn.ReLU(),
                             nn.Linear(128, 128), nn.ReLU(),
                             nn.Linear(128, 10))

    cpu_model, device_model = mlp(), mlp().to("openreg")
    device_model.load_state_dict(cpu_model.state_dict())
    cpu_optimizer = torch.optim.Adam(cpu_model.parameters(), lr=1e-3)
    device_optimizer = torch.optim.Adam(device_model.parameters(), lr=1e-3,
                                        capturable=True)
    cpu_x, cpu_y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    device_x, device_y = cpu_x.to("openreg"), cpu_y.to("openreg")
    loss_fn = nn.functional.cross_entropy

    def step(model, optimizer, x, y):
        optimizer.zero_grad(set_to_none=False)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    _warm_up(torch, lambda: step(device_model, device_optimizer, device_x,
                                 device_y))
    graph = _capture(torch, lambda: step(device_model, device_optimizer,
                                         device_x, device_y))
    repeats = max(5, int(40 * scale))
    sync = torch.openreg.synchronize
    cpu, replay = _alternate(
        ROUNDS,
        lambda: _time(lambda: step(cpu_model, cpu_optimizer, cpu_x, cpu_y),
                      repeats),
        lambda: _time(graph.replay, repeats, sync))
    return [("graph: MLP training step (Adam) replay", "CPU eager", cpu,
             replay)]


def graph_model_steps(torch, scale):
    """The model section's transformer and CNN training steps replayed,
    against CPU eager and against the same step on openreg in eager mode:
    the daemon's kernels with no client competing for the cores (replay)
    against the same kernels fed op by op (docs/ARCHITECTURE.md, "The cost
    of one op")."""
    # Capturable AdamW on openreg (the step count stays on the device);
    # CPU eager's AdamW cannot be capturable, and computes the same.
    optimizers = {
        "transformer": lambda params, device: torch.optim.AdamW(
            params, lr=1e-3, capturable=device != "cpu"),
        "CNN": lambda params, device: torch.optim.SGD(params, lr=0.01,
                                                      momentum=0.9),
    }
    repeats = max(5, int(20 * scale))
    sync = torch.openreg.synchronize
    rows = []
    for name, build, _, inputs, targets, loss_fn in _workloads(torch):
        make_optimizer = optimizers[name.split()[0]]
        steps = {}
        for device in ("cpu", "openreg"):
            torch.manual_seed(0)
            model = build(torch).to(device)
            optimizer = make_optimizer(model.parameters(), device)
            x, y = inputs.to(device), targets.to(device)

            def step(model=model, optimizer=optimizer, x=x, y=y):
                optimizer.zero_grad(set_to_none=False)
                loss_fn(model(x), y).backward()
                optimizer.step()

            steps[device] = step
        _warm_up(torch, steps["openreg"])
        graph = _capture(torch, steps["openreg"])
        cpu, eager, replay = _alternate(
            ROUNDS, lambda: _time(steps["cpu"], repeats),
            lambda: _time(steps["openreg"], repeats, sync),
            lambda: _time(graph.replay, repeats, sync))
        short = name.split(" (")[0]
        print(f"graph: {short}: CPU eager {cpu * 1e3:.2f} ms, openreg eager "
              f"{eager * 1e3:.2f} ms ({eager / cpu:.2f}x), replayed "
              f"{replay * 1e3:.2f} ms ({replay / cpu:.2f}x)")
        rows.append((f"graph: {short} replay", "CPU eager", cpu, replay))
        _print_kernels_by_op(torch, short, steps, graph, repeats)
    return rows


def _print_kernels_by_op(torch, name, steps, graph, repeats, shown=4):
    """The daemon's kernel time per step, eager against replayed (the same
    commands with the client idle: what the kernels lose to the client's
    dispatch on the same cores), and the ops that take most of it, with
    CPU eager's time in the same ops (torch.profiler, inclusive)."""
    from torch.profiler import ProfilerActivity, profile

    def kernels(fn):
        with torch.openreg.command_costs() as costs:
            for _ in range(repeats):
                fn()
            torch.openreg.synchronize()
        return {entry["op"]: entry["kernel_ns"] / repeats / 1e6
                for entry in costs.ops}

    eager = kernels(steps["openreg"])
    replayed = kernels(graph.replay)
    with profile(activities=[ProfilerActivity.CPU]) as profiled:
        for _ in range(repeats):
            steps["cpu"]()
    cpu = {event.key: event.cpu_time_total / repeats / 1e3
           for event in profiled.key_averages()}

    def ms(value):
        # Absent: a capture loops foreach ops per tensor, and CPU eager's
        # optimizers run their for-loop form.
        return "-" if value is None else f"{value:.2f}"

    top = sorted(eager, key=eager.get, reverse=True)[:shown]
    by_op = ", ".join(
        f"{op.split('.')[0].removeprefix('aten::')} {ms(eager[op])} / "
        f"{ms(replayed.get('graph_replay > ' + op))} / "
        f"{ms(cpu.get(op.split('.')[0]))}" for op in top)
    print(f"graph: {name}: daemon kernel time per step, eager "
          f"{sum(eager.values()):.2f} ms, replayed "
          f"{ms(replayed.get('graph_replay'))} ms; by op, eager / "
          f"replayed / CPU eager (ms): {by_op}")


SECTIONS = [graph_chain, graph_costs, graph_decode, graph_training_step,
            graph_model_steps]
