"""Many client processes on one daemon: aggregate small-op throughput
(torch.add of 1024 floats in a loop, a synchronize every 50 ops) with N =
1, 2, 4, 8, 16, 32, 64 concurrent client processes, each N against the best
aggregate at any smaller N (the issue's bar at 64: throughput >= 0.8x, so a
time ratio <= 1.25x), and the daemon's thread count while 64 clients run
(the bar: devices x executors + a small constant).

Aggregate throughput is steady state: the ops completed while all N
clients were running (from the last client's start to the first one's
end; perf_counter is the system-wide monotonic clock), so that the ramp of
64 processes waking from a barrier on 2 cores is not counted. The same
loop on CPU eager (N processes, one thread each) is the reference for what
64 processes on this host cost without openreg: the OS alone loses some
throughput to switching between them.

Then the same with N clients each running iterations of a few small ops
and a synchronize (4 adds, as the latency section's iteration), the
issue's many-client probe: aggregate iterations/s at each N, each N
against the best smaller N, printed as iterations/s (its bars: 64 clients
>= 0.8x the best smaller N, the best N >= 24k iterations/s).

What the host itself loses at 64 is printed beside it: N processes each
looping on 4 adds on CPU and a 1-byte round trip over a socket pair to one
server process (epoll), the same shape (a process that blocks once per
iteration until another process answers) without openreg: what the
host's own switching between 64 processes costs (docs/ARCHITECTURE.md,
"What the host itself loses at 64", has the figures).

Also the single client's per-op time against CPU eager, pipelined and as
one synchronized call (latency).

Clients are forked from a forkserver that imported torch (the import never
touches the device), so 64 of them start in seconds; each attaches,
warms up, then runs the measured rounds in step with the others.
"""

import os
import select
import time

import multiprocessing as mp

from timing import compare, single_call

CLIENT_COUNTS = (1, 2, 4, 8, 16, 32, 64)
SYNC_EVERY = 50  # adds per synchronize in the throughput rows
ITERATION_ADDS = 4  # adds per synchronize in an iteration


def _client(device, attach, start, results, rounds, seconds, ops_per_sync):
    import torch

    torch.set_num_threads(1)
    sync = torch.openreg.synchronize if device == "openreg" else (lambda: None)
    # One attach at a time: 64 processes connecting at once are a test of
    # the attach path, not of execution.
    with attach:
        x = torch.randn(1024, device=device)
        torch.add(x, x)  # the first launch of a signature is checked
        sync()
    for _ in range(rounds):
        start.wait()
        began = time.perf_counter()
        deadline = began + seconds
        batch_ends = []  # when each batch of ops_per_sync ops completed
        while not batch_ends or batch_ends[-1] < deadline:
            for _ in range(ops_per_sync):
                torch.add(x, x)
            sync()
            batch_ends.append(time.perf_counter())
        results.put((began, batch_ends))


def _round_trip_client(channel, attach, start, results, rounds, seconds):
    """The host reference's client: ITERATION_ADDS adds on CPU, then a
    1-byte round trip to the server, as an openreg client synchronizes."""
    import torch

    torch.set_num_threads(1)
    fd = channel.fileno()
    with attach:
        x = torch.randn(1024)
        torch.add(x, x)
    for _ in range(rounds):
        start.wait()
        began = time.perf_counter()
        deadline = began + seconds
        batch_ends = []
        while not batch_ends or batch_ends[-1] < deadline:
            for _ in range(ITERATION_ADDS):
                torch.add(x, x)
            os.write(fd, b"?")
            os.read(fd, 1)
            batch_ends.append(time.perf_counter())
        results.put((began, batch_ends))


def _round_trip_server(channels, stop):
    """Answers each client's byte at once, one thread for all (epoll), until
    `stop` is readable."""
    poller = select.epoll()
    for channel in channels + [stop]:
        poller.register(channel.fileno(), select.EPOLLIN)
    stop_fd = stop.fileno()
    while True:
        for fd, _ in poller.poll():
            if fd == stop_fd:
                return
            if os.read(fd, 1):
                os.write(fd, b"!")


def _daemon_pid():
    socket = os.environ.get("OPENREG_DAEMON_SOCKET", "")
    try:
        with open(socket + ".lock") as lock:
            return int(lock.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _threads(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return -1


def _aggregate(context, device, clients, rounds, seconds, pid,
               ops_per_sync=SYNC_EVERY):
    """Best aggregate synchronized batches of `ops_per_sync` adds per second
    over `rounds`, and the most daemon threads seen while the clients
    ran."""
    return _measure(context, clients, rounds, seconds, pid,
                    lambda index, attach, start, results: (
                        _client, (device, attach, start, results, rounds,
                                  seconds, ops_per_sync)))


def _round_trips(context, clients, rounds, seconds):
    """The host reference: best aggregate iterations/s of `clients`
    _round_trip_client processes answered by one server process."""
    pairs = [context.Pipe() for _ in range(clients)]
    stop_reader, stop_writer = context.Pipe(duplex=False)
    server = context.Process(target=_round_trip_server,
                             args=([ours for ours, _ in pairs], stop_reader))
    server.start()
    try:
        best, _ = _measure(context, clients, rounds, seconds, None,
                           lambda index, attach, start, results: (
                               _round_trip_client,
                               (pairs[index][1], attach, start, results,
                                rounds, seconds)))
    finally:
        stop_writer.send_bytes(b"stop")
        server.join(60)
        if server.is_alive():
            server.kill()
    return best


def _measure(context, clients, rounds, seconds, pid, client_of):
    """Starts `clients` processes (client_of(index, attach, start, results)
    gives the index-th one's target and args), runs `rounds` in step and
    returns the best steady-state aggregate rate and the most daemon
    threads seen."""
    attach = context.Lock()
    start = context.Barrier(clients + 1)
    results = context.Queue()
    processes = []
    for index in range(clients):
        target, args = client_of(index, attach, start, results)
        processes.append(context.Process(target=target, args=args))
    for process in processes:
        process.start()
    best, most_threads = 0.0, 0
    try:
        for _ in range(rounds):
            start.wait(timeout=300)
            time.sleep(seconds / 2)
            most_threads = max(most_threads, _threads(pid) if pid else -1)
            samples = [results.get(timeout=300) for _ in range(clients)]
            all_running = max(began for began, _ in samples)
            first_done = min(ends[-1] for _, ends in samples)
            batches = sum(1 for _, ends in samples for end in ends
                          if all_running < end <= first_done)
            best = max(best, batches / (first_done - all_running))
    finally:
        for process in processes:
            process.join(60)
            if process.is_alive():
                process.kill()
    return best, most_threads


def concurrent_clients(torch, scale):
    rows = []
    cpu = torch.randn(1024)
    device = cpu.to("openreg")
    repeats = int(2000 * scale) or 1
    rows.append(("add 1024 floats, 1 client, per op", "CPU eager") + compare(
        lambda: torch.add(cpu, cpu), lambda: torch.add(device, device),
        repeats, rounds=10, device_sync=torch.openreg.synchronize))
    rows.append(("add 1024 floats + synchronize (latency)", "CPU eager")
                + compare(lambda: torch.add(cpu, cpu),
                          lambda: torch.add(device, device),
                          int(500 * scale) or 1, rounds=10,
                          measure=single_call,
                          device_sync=torch.openreg.synchronize))

    pid = _daemon_pid()
    idle_threads = _threads(pid) if pid else -1
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(["torch"])
    seconds = max(0.3, 1.5 * scale)
    rounds = 2
    for device in ("cpu", "openreg"):
        best_smaller = 0.0
        for clients in CLIENT_COUNTS:
            batches, threads = _aggregate(context, device, clients, rounds,
                                          seconds, pid)
            aggregate = batches * SYNC_EVERY  # adds/s
            if device == "cpu" and clients != CLIENT_COUNTS[-1]:
                best_smaller = max(best_smaller, aggregate)
                continue  # only the last CPU row is the reference
            name = f"add 1024, {clients} clients, aggregate"
            if device == "cpu":
                name = f"CPU eager add 1024, {clients} processes"
            elif clients == CLIENT_COUNTS[-1]:
                name = f"add 1024, {clients} clients ({threads} daemon thr)"
            if best_smaller > 0:
                rows.append((name, "best fewer") + (1 / best_smaller,
                                                    1 / aggregate))
            else:
                rows.append((name, "itself") + (1 / aggregate,
                                                1 / aggregate))
            best_smaller = max(best_smaller, aggregate)
    print(f"daemon threads: {idle_threads} before the clients, {threads} "
          f"with {CLIENT_COUNTS[-1]} clients")
    rows += _iterations(context, rounds, seconds, pid)
    return rows


def _iterations(context, rounds, seconds, pid):
    """openreg's aggregate iterations/s (ITERATION_ADDS adds and a
    synchronize) at each client count, each against the best smaller."""
    rows, reached = [], []
    best_smaller = 0.0
    for clients in CLIENT_COUNTS:
        per_second, _ = _aggregate(context, "openreg", clients, rounds,
                                   seconds, pid, ITERATION_ADDS)
        name = f"iteration, {clients} clients, aggregate"
        if best_smaller > 0:
            rows.append((name, "best fewer", 1 / best_smaller, 1 / per_second))
        else:
            rows.append((name, "itself", 1 / per_second, 1 / per_second))
        reached.append(f"{clients}: {per_second / 1e3:.1f}k")
        best_smaller = max(best_smaller, per_second)
    print(f"iterations ({ITERATION_ADDS} adds + synchronize) per second, "
          f"all clients together, by client count: {', '.join(reached)}")
    rows += _host_reference(context, rounds, seconds)
    return rows


def _host_reference(context, rounds, seconds):
    """The same loop without openreg: CPU adds and a round trip to a server
    process; what switching between 64 processes costs this host."""
    best_smaller, reached = 0.0, []
    for clients in CLIENT_COUNTS[:-1]:
        per_second = _round_trips(context, clients, rounds, seconds)
        best_smaller = max(best_smaller, per_second)
        reached.append(f"{clients}: {per_second / 1e3:.1f}k")
    clients = CLIENT_COUNTS[-1]
    per_second = _round_trips(context, clients, rounds, seconds)
    reached.append(f"{clients}: {per_second / 1e3:.1f}k")
    print(f"host reference ({ITERATION_ADDS} CPU adds + a round trip to one "
          f"server process) per second, by process count: "
          f"{', '.join(reached)}; {clients} processes "
          f"{per_second / best_smaller:.2f}x the best smaller count")
    return [(f"host ref: round trip, {clients} processes", "best fewer",
             1 / best_smaller, 1 / per_second)]


SECTIONS = [concurrent_clients]
