"""The zygote: a process that has imported torch (and so torch_openreg) and
its Python meta kernels but never touched the device, and forks one child
per run to execute a Python script. Those imports cost about two seconds
per fresh process; a fork costs milliseconds. The device client reads $OPENREG_DAEMON_SOCKET at its
first device use, so each child can be pointed at its run's daemon.

Protocol (JSON lines): the campaign writes requests on the zygote's stdin
({"id", "script", "argv", "env", "cwd", "stdout", "stderr"}); the zygote
answers on its stdout {"ready": pid} once, then {"id", "pid"} when a child
started and {"id", "returncode"} when it ended (negative: killed by that
signal). Each child leads its own process group (pgid = its pid), so a
run and everything it started can be killed together. When its stdin
closes, the zygote kills the process groups of the children still running,
reaps them and exits.
"""

import json
import os
import select
import signal
import subprocess
import sys
import threading

__all__ = ["Zygote", "ZygoteError", "serve"]


def _exit_code(code):
    """The exit status of `sys.exit(code)`, as the interpreter computes it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _run_script(script):
    """Runs `script` as __main__ and returns its exit status, the way
    `python script.py` would (exceptions through sys.excepthook, then
    non-daemon threads joined and atexit handlers run)."""
    import atexit
    import runpy

    try:
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exit_request:
        code = _exit_code(exit_request.code)
    except BaseException:  # noqa: BLE001 - reported like the interpreter
        sys.excepthook(*sys.exc_info())
        code = 1
    threading._shutdown()  # joins non-daemon threads, as at interpreter exit
    atexit._run_exitfuncs()
    return code


def _child(request, private_fds):
    """In the forked child: becomes the run's process and never returns."""
    code = 127
    try:
        os.setpgid(0, 0)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fd in private_fds:
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        os.chdir(request["cwd"])
        os.environ.update(request["env"])
        script = request["script"]
        sys.argv = list(request["argv"])
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        import random
        random.seed()  # a fresh process would not share the zygote's state
        code = _run_script(script)
    except BaseException:  # noqa: BLE001 - the child must reach _exit
        import traceback
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed or broken stream
                pass
        os._exit(code)


def serve():
    """The zygote's main loop (python -m torch_openreg.fi.zygote)."""
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints must not corrupt the replies
    import torch  # the point of the zygote (autoloads openreg)
    import torch_openreg.fi  # noqa: F401 - what programs import to report

    # The first op on any device imports torch's Python meta kernels
    # (~800 modules, about a second); an op on meta tensors does it here,
    # without touching the openreg device.
    (torch.ones(2, device="meta") * 2).sum()

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the campaign stops us
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    private_fds = (wake_read, wake_write, replies.fileno())

    def send(message):
        try:
            replies.write(json.dumps(message) + "\n")
        except OSError:
            pass  # the campaign is gone: stdin's end will stop us

    children = {}  # pid -> request id

    def reap(block=False):
        while children:
            try:
                pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            send({"id": children.pop(pid, None),
                  "returncode": os.waitstatus_to_exitcode(status)})

    send({"ready": os.getpid()})
    pending = b""
    while True:
        readable, _, _ = select.select([0, wake_read], [], [])
        if wake_read in readable:
            while True:
                try:
                    if not os.read(wake_read, 512):
                        break
                except BlockingIOError:
                    break
            reap()
        if 0 not in readable:
            continue
        data = os.read(0, 65536)
        if not data:
            for pid in children:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            reap(block=True)
            return
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _child(request, private_fds)
            try:
                os.setpgid(pid, pid)  # also done by the child: no race
            except (ProcessLookupError, PermissionError):
                pass
            children[pid] = request["id"]
            send({"id": request["id"], "pid": pid})


class ZygoteError(RuntimeError):
    """The zygote died or did not start."""


class ZygoteRun:
    """One program run forked by the zygote."""

    def __init__(self, zygote):
        self._zygote = zygote
        self.pid = None
        self.returncode = None
        self._started = threading.Event()
        self._done = threading.Event()

    def wait(self, timeout=None):
        """Whether the run ended within `timeout` seconds."""
        if not self._done.wait(timeout):
            return False
        if self.returncode is None:
            raise ZygoteError(self._zygote.failure())
        return True

    def kill(self):
        """SIGKILL to the run's process group (the run and its children)."""
        self._started.wait()
        if self.pid is not None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


class Zygote:
    """The campaign's side: starts the zygote and forks runs through it."""

    def __init__(self, log_path, env=None):
        """`env`: variables added to this process's environment for the
        zygote (read at its start, e.g. OMP_NUM_THREADS) and its runs."""
        self._log = open(log_path, "ab")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "torch_openreg.fi.zygote"],
            env={**os.environ, **(env or {})}, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._log, start_new_session=True)
        self._log_path = log_path
        self._lock = threading.Lock()
        self._runs = {}
        self._next_id = 0
        self._ready = threading.Event()
        self._closed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def failure(self):
        with open(self._log_path, errors="replace") as log:
            tail = log.read()[-4000:]
        return f"the zygote process exited ({self._process.poll()}):\n{tail}"

    def _read(self):
        for line in self._process.stdout:
            message = json.loads(line)
            if "ready" in message:
                self._ready.set()
                continue
            with self._lock:
                run = self._runs.get(message["id"])
            if "pid" in message:
                run.pid = message["pid"]
                run._started.set()
            else:
                run.returncode = message["returncode"]
                with self._lock:
                    del self._runs[message["id"]]
                run._done.set()
        self._process.wait()
        self._ready.set()
        with self._lock:
            self._closed = True
            orphans, self._runs = list(self._runs.values()), {}
        for run in orphans:
            run._started.set()
            run._done.set()

    def wait_ready(self, timeout=120):
        if not self._ready.wait(timeout) or self._process.poll() is not None:
            raise ZygoteError(self.failure())

    def spawn(self, script, argv, env, cwd, stdout, stderr):
        """Forks a run of `script` (argv[0] is its name); `env` holds the
        variables to set on top of this process's environment."""
        run = ZygoteRun(self)
        request = {"script": script, "argv": argv, "env": env, "cwd": cwd,
                   "stdout": stdout, "stderr": stderr}
        with self._lock:
            if self._closed:
                raise ZygoteError(self.failure())
            request["id"] = self._next_id
            self._next_id += 1
            self._runs[request["id"]] = run
            try:
                self._process.stdin.write((json.dumps(request) + "\n").encode())
                self._process.stdin.flush()
            except BrokenPipeError:
                raise ZygoteError(self.failure()) from None
        return run

    def close(self):
        """Stops the zygote (it kills and reaps the runs still going)."""
        try:
            self._process.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._reader.join()
        self._process.stdout.close()
        self._log.close()


if __name__ == "__main__":
    serve()
