"""openreg-fi, the fault-injection campaign runner (torch_openreg.fi).

First its parts on their own: the reporting API, output comparison and
classification, fault sampling from a profile, the configuration and its
errors, the campaign folder, the report (Wilson intervals, plots) and the
two launchers (zygote, subprocess). Then whole campaigns against real
daemons with known outcomes: a corrected error is Masked, a kernel failure
DUE, a run that never ends Hang, a run that kills itself Crash, exponent
bit flips in the worked example SDC or DUE and low mantissa flips Masked;
phase targeting, resume, replay and --no-zygote. Every campaign must leave
no process behind.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from daemon_fixture import assert_no_descendants, python_env
from torch_openreg import fi
from torch_openreg.fi import classify as cls
from torch_openreg.fi.__main__ import main
from torch_openreg.fi.config import ConfigError, resolve
from torch_openreg.fi.faults import Population, fault_for_run, populations
from torch_openreg.fi.intervals import wilson
from torch_openreg.fi.launch import Launcher, Program
from torch_openreg.fi.summary import format_summary, summarize
from torch_openreg.fi.store import CampaignDir

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, os.pardir, os.pardir, "examples",
                       "fi_inference.py")

# Children (the zygote, subprocess runs) find the same torch_openreg.
os.environ["PYTHONPATH"] = python_env()["PYTHONPATH"]


@pytest.fixture
def no_leftovers():
    yield
    assert_no_descendants()


# ---------------------------------------------------------------- report API

def test_report_writes_json_lines(tmp_path, monkeypatch):
    path = tmp_path / "result.jsonl"
    monkeypatch.setenv(fi.RESULT_ENV, str(path))
    fi.report("loss", torch.tensor(1.5))
    fi.report("logits", torch.tensor([[1.0, 2.0]], dtype=torch.float16))
    fi.report("z", torch.tensor([1 + 2j]))
    fi.report("mixed", {"a": (1, 2.5), 3: [True, None, "s"]})
    fi.detected("nan loss")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [
        {"name": "loss", "value": 1.5},
        {"name": "logits", "value": [[1.0, 2.0]]},
        {"name": "z", "value": [[1.0, 2.0]]},
        {"name": "mixed", "value": {"a": [1, 2.5], "3": [True, None, "s"]}},
        {"detected": "nan loss"},
    ]
    values, detected, restarts = cls.read_result_file(str(path))
    assert values["loss"] == [1.5] and detected == ["nan loss"]
    assert restarts == 0
    with pytest.raises(TypeError, match="cannot report a object"):
        fi.report("bad", object())


def test_a_restarted_job_is_judged_by_its_last_attempt(tmp_path,
                                                      monkeypatch):
    """Under torchrun each report carries the attempt: the first attempt's
    reports (it failed) do not count, and a last attempt matching the
    golden output is Recovered, not Masked."""
    path = tmp_path / "result.jsonl"
    monkeypatch.setenv(fi.RESULT_ENV, str(path))
    monkeypatch.setenv(fi.ATTEMPT_ENV, "0")
    fi.report("loss", 9.0)
    fi.detected("the first attempt failed")
    monkeypatch.setenv(fi.ATTEMPT_ENV, "1")
    fi.report("loss", 1.0)
    values, detected, restarts = cls.read_result_file(str(path))
    assert (values, detected, restarts) == ({"loss": [1.0]}, [], 1)
    golden = cls.Output(values={"loss": [1.0]})
    output = cls.read_output("report", str(path), None, None)
    result = cls.RunResult(0, False, 1.0, output)
    assert cls.classify(result, golden) == (
        "Recovered", "the golden output after 1 restart(s)")
    monkeypatch.setenv(fi.ATTEMPT_ENV, "1")
    fi.report("loss", 2.0)
    output = cls.read_output("report", str(path), None, None)
    assert cls.classify(cls.RunResult(0, False, 1.0, output), golden)[0] == \
        "SDC"


def test_report_without_campaign_does_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(fi.RESULT_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    fi.report("loss", 1.0)
    fi.detected("x")
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------ compare and classify

def test_compare_values_tolerance_nan_and_structure():
    assert cls.compare_values([1.0, 2.0], [1.0, 2.0], 0, 0) is None
    assert cls.compare_values([1.0, 2.0001], [1.0, 2.0], 0, 0) == \
        "value[1]: 2.0001 != 2.0 (golden)"
    assert cls.compare_values([1.0, 2.0001], [1.0, 2.0], 1e-4, 0) is None
    assert cls.compare_values(2.05, 2.0, 0, 0.1) is None
    assert cls.compare_values(float("nan"), float("nan"), 0, 0) is None
    assert cls.compare_values(float("nan"), 1.0, 1, 1) is not None
    assert cls.compare_values(float("inf"), 1e38, 1, 0) is not None
    assert cls.compare_values([1.0], [1.0, 2.0], 0, 0) == \
        "value: length 1 != 2 (golden)"
    assert cls.compare_values(True, 1, 0, 0) is not None
    assert cls.compare_values({"a": [1]}, {"a": [2]}, 0, 0) == \
        "value['a'][0]: 1 != 2 (golden)"


def test_compare_text_numbers_with_tolerance():
    golden = "epoch 1 loss 0.25\ntensor([1.5000, -2.0000e-03, nan])\n"
    assert cls.compare_text(golden, golden, 0, 0) is None
    changed = golden.replace("-2.0000e-03", "-2.0001e-03")
    assert cls.compare_text(changed, golden, 0, 0) == \
        'output line 2: "-2.0001e-03" != "-2.0000e-03" (golden)'
    assert cls.compare_text(changed, golden, 1e-3, 0) is None
    assert cls.compare_text(golden.replace("loss", "LOSS"), golden, 1, 1) \
        is not None
    assert cls.compare_text(golden + "extra", golden, 0, 0) is not None


def _result(returncode=0, timed_out=False, values=None, detected=()):
    return cls.RunResult(returncode, timed_out, 1.0,
                         cls.Output(values={"y": [1.0]} if values is None
                                    else values,
                                    detected=detected), "Err: last")


def test_classify_every_outcome():
    golden = cls.Output(values={"y": [1.0]})
    assert cls.classify(_result(), golden) == ("Masked", "")
    assert cls.classify(_result(values={"y": [1.5]}), golden)[0] == "SDC"
    assert cls.classify(_result(values={}), golden) == \
        ("SDC", "not reported: y")
    assert cls.classify(_result(detected=["nan"]), golden) == \
        ("DUE", "detected: nan")
    assert cls.classify(_result(returncode=1), golden) == \
        ("DUE", "exit status 1: Err: last")
    assert cls.classify(_result(returncode=-9), golden) == \
        ("Crash", "killed by SIGKILL")
    assert cls.classify(_result(returncode=-9, timed_out=True), golden)[0] \
        == "Hang"
    # The most severe sign wins: a detected error with a bad exit is DUE.
    assert cls.classify(_result(returncode=2, detected=["x"]), golden)[0] \
        == "DUE"
    # An exception, then a signal while the interpreter exits: DUE.
    exited = _result(returncode=-6)
    exited.exception = "RuntimeError: injected fault"
    assert cls.classify(exited, golden) == (
        "DUE", "RuntimeError: injected fault (then SIGABRT while exiting)")


def test_the_last_traceback_names_the_exception(tmp_path):
    stderr = tmp_path / "stderr.txt"
    stderr.write_text("warning: x\nTraceback (most recent call last):\n"
                      '  File "a.py", line 1, in <module>\n'
                      "torch.OutOfMemoryError: out of memory\n"
                      "terminate called without an active exception\n")
    assert cls.last_exception(str(stderr)) == \
        "torch.OutOfMemoryError: out of memory"
    stderr.write_text("no traceback here\n")
    assert cls.last_exception(str(stderr)) == ""


# ------------------------------------------------------------------ sampling

PROFILE = [
    {"device": 0, "kind": "kernel", "op": "aten::add.Tensor",
     "phase": "forward", "count": 30},
    {"device": 0, "kind": "kernel", "op": "aten::addmm.default",
     "phase": "forward", "count": 10},
    {"device": 0, "kind": "kernel", "op": "aten::mm.default",
     "phase": "backward", "count": 20},
    {"device": 1, "kind": "kernel", "op": "aten::add.Tensor",
     "phase": "optimizer", "count": 40},
    {"device": 0, "kind": "copy", "op": "copy_host_to_device",
     "phase": "forward", "count": 5},
    {"device": 0, "kind": "copy", "op": "copy_device_to_host",
     "phase": "forward", "count": 3},
]


def test_population_is_uniform_over_instances():
    import random

    population = Population(PROFILE, "kernel")
    assert population.total == 100
    rng = random.Random(0)
    hits = {}
    for _ in range(20000):
        trigger = population.draw(rng)
        key = (trigger["device"], trigger["op"], trigger["phase"])
        hits[key] = hits.get(key, 0) + 1
        assert trigger["kind"] == "kernel" and trigger["nth"] >= 1
    # Each group is hit in proportion to its count (30/10/20/40 %).
    expected = {(0, "aten::add.Tensor", "forward"): 0.3,
                (0, "aten::addmm.default", "forward"): 0.1,
                (0, "aten::mm.default", "backward"): 0.2,
                (1, "aten::add.Tensor", "optimizer"): 0.4}
    for key, share in expected.items():
        assert abs(hits[key] / 20000 - share) < 0.015, (key, hits[key])


def test_population_filters_and_nth_range():
    import random

    rng = random.Random(1)
    adds = Population(PROFILE, "kernel", ops=["aten::add"])
    assert adds.total == 70
    assert Population(PROFILE, "kernel", ops=["aten::*mm*"]).total == 30
    assert Population(PROFILE, "kernel", phase="backward").total == 20
    assert Population(PROFILE, "kernel", device=1).total == 40
    nths = {adds.draw(rng)["nth"] for _ in range(3000)}
    assert min(nths) == 1 and max(nths) == 40
    # Copies have no op in their trigger: the two copy entries form one
    # group of 8 instances.
    copies = Population(PROFILE, "copy")
    triggers = [copies.draw(rng) for _ in range(500)]
    assert all("op" not in trigger for trigger in triggers)
    assert {trigger["nth"] for trigger in triggers} == set(range(1, 9))
    # Every command: grouped by device and phase only.
    anything = Population(PROFILE, "any")
    assert anything.total == 108
    assert [key for key, _ in anything.groups] == [
        (0, "any", "", "backward"), (0, "any", "", "forward"),
        (1, "any", "", "optimizer")]


def _config(**flags):
    return resolve({"command": ["prog.py"], "cwd": "/", **flags})


def test_fault_for_run_is_a_function_of_seed_and_index():
    config = _config(models="corrupt_output,kernel_failure,stuck_at",
                     bits="23-30", seed=7,
                     model_args='{"kernel_failure": {"message": "x"}}')
    pools = populations(config, PROFILE)
    faults = [fault_for_run(config, pools, index) for index in range(30)]
    assert faults == [fault_for_run(config, pools, index)
                      for index in range(30)]
    assert faults[0]["corrupt_output"] == {
        "pattern": "bit_flip", "bit_count": 1, "min_bit": 23, "max_bit": 30}
    assert faults[1]["kernel_failure"] == {"message": "x"}
    assert all(23 <= fault["stuck_at"]["bit"] <= 30 for fault in faults[2::3])
    assert all(fault["daemon_wide"] and fault["trigger"]["nth"] >= 1
               for fault in faults)
    other_seed = _config(models="corrupt_output,kernel_failure,stuck_at",
                         bits="23-30", seed=8,
                         model_args='{"kernel_failure": {"message": "x"}}')
    assert faults != [fault_for_run(other_seed, pools, index)
                      for index in range(30)]


def test_empty_population_names_the_filter():
    config = _config(ops="aten::conv*")
    with pytest.raises(ConfigError, match="--op: the golden run has no "
                       "kernel command matching --op aten::conv"):
        populations(config, PROFILE)


# ------------------------------------------------------------ configuration

@pytest.mark.parametrize("flags, message", [
    (["--bits", "30-23"], "--bits: expected LO-HI"),
    (["--bits", "64"], "--bits: expected LO-HI"),
    (["--model", "bitflip"], "--model: unknown model 'bitflip'"),
    (["--phase", "training"], "--phase: expected one of forward"),
    (["--model", "copy_failure", "--op", "aten::add"],
     "--op: only kernels and collectives have an op"),
    (["--model", "kernel_failure", "--bits", "3"], "--bits: applies to"),
    (["--model", "corrupt_output", "--kind", "copy"],
     "--kind: corrupt_output targets only kernel and collective commands"),
    (["--model-args", "{bad"], "--model-args: not JSON"),
    (["--model-args", '{"hang": {}}'], "--model-args: hang is not among"),
    (["--compare", "file"], "--compare: file needs --output-file"),
    (["--device", "2"], "--device: expected 0 to 1"),
    (["--rtol", "-1"], "--rtol: expected a number >= 0"),
    (["--runs", "-1"], "--runs: expected an integer >= 0"),
    (["--jobs", "0"], "--jobs: expected an integer >= 1"),
])
def test_bad_flags_are_named(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--dir", str(tmp_path / "c"), *flags, "--", "p.py"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_program_is_required_and_goes_after_dashes(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["run", "--dir", str(tmp_path)])
    assert "PROGRAM: give the program after `--`" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "--dir", str(tmp_path), "p.py"])
    assert "the program goes after `--`" in capsys.readouterr().err


def test_resume_keeps_stored_config_and_refuses_changes():
    stored = _config(models="kernel_failure", seed=3, rtol=1e-3)
    assert resolve({}, stored) == stored
    assert resolve({"seed": 3, "models": "kernel_failure"}, stored) == stored
    with pytest.raises(ConfigError, match="--seed: this campaign was created "
                       "with 3, not 4"):
        resolve({"seed": 4}, stored)
    with pytest.raises(ConfigError, match="--model: .*kernel_failure"):
        resolve({"models": "corrupt_output"}, stored)


def test_program_detection():
    assert Program(["train.py", "-x"], "/").script == "train.py"
    python = Program([sys.executable, "train.py", "-x"], "/")
    assert python.script == "train.py" and python.args == ["-x"]
    assert python.argv("/r") == ["train.py", "-x"]
    assert Program(["bash", "run.sh"], "/").script is None
    assert Program(["p.py", "--out={run_dir}/o"], "/").argv("/r") == \
        ["p.py", "--out=/r/o"]


# --------------------------------------------------------- folder and report

def test_torn_record_is_cut_off(tmp_path):
    store = CampaignDir(tmp_path)
    store.append_run({"run": 1, "outcome": "SDC"})
    store.append_run({"run": 0, "outcome": "Masked"})
    with open(store.file("runs.jsonl"), "a") as f:
        f.write('{"run": 2, "outc')
    assert [r["run"] for r in store.read_runs()] == [0, 1]
    store.append_run({"run": 2, "outcome": "DUE"})
    assert [r["outcome"] for r in store.read_runs()] == ["Masked", "SDC", "DUE"]


def test_wilson_interval():
    low, high = wilson(0, 10)
    assert low == 0 and abs(high - 0.2775) < 1e-4
    low, high = wilson(5, 10)
    assert abs(low - 0.2366) < 1e-4 and abs(high - 0.7634) < 1e-4
    low, high = wilson(10, 10)
    assert abs(low - 0.7225) < 1e-4 and abs(high - 1) < 1e-12
    assert wilson(0, 0) == (0.0, 1.0)
    # Narrower with more trials, always around the rate.
    assert wilson(50, 100)[1] - wilson(50, 100)[0] < high - low


def _record(run, outcome, model="corrupt_output", op="aten::add.Tensor",
            bit=None):
    return {"run": run, "outcome": outcome, "model": model,
            "fault": {"trigger": {"kind": "kernel", "op": op}},
            "fired": True, "seconds": 0.5, "overhead": 0.1,
            "records": [{"bits": [bit]}] if bit is not None else []}


def test_wilson_interval_always_contains_the_rate():
    for trials in range(1, 60):
        for successes in range(trials + 1):
            low, high = wilson(successes, trials)
            assert 0.0 <= low <= successes / trials <= high <= 1.0


def test_summary_and_plots(tmp_path):
    records = ([_record(i, "Masked", bit=i % 4) for i in range(12)] +
               [_record(12 + i, "SDC", op="aten::mm.default", bit=30)
                for i in range(6)] +
               [_record(18, "DUE", model="kernel_failure"),
                _record(19, "Hang", model="hang")])
    summary = summarize(records)
    assert summary["runs"] == 20
    assert summary["outcomes"]["Masked"]["count"] == 12
    assert summary["outcomes"]["SDC"]["ci95"] == list(wilson(6, 20))
    assert summary["by_model"]["corrupt_output"] == {
        "runs": 18, "Masked": 12, "Recovered": 0, "SDC": 6, "DUE": 0,
        "Hang": 0, "Crash": 0}
    assert summary["by_op"]["aten::mm.default"]["SDC"] == 6
    assert summary["by_bit"]["30"]["SDC"] == 6
    assert summary["by_bit"]["0"] == {
        "runs": 3, "Masked": 3, "Recovered": 0, "SDC": 0, "DUE": 0,
        "Hang": 0, "Crash": 0, "sdc_ci95": list(wilson(0, 3))}
    text = format_summary(summary)
    assert "Masked        12   60.0%  38.7% - 78.1%" in text
    from torch_openreg.fi.plots import write_plots

    paths = write_plots(summary, str(tmp_path))
    assert [os.path.basename(p) for p in paths] == [
        "outcomes_by_model.png", "outcomes_by_op.png", "sdc_by_bit.png"]
    for path in paths:
        with open(path, "rb") as png:
            assert png.read(8) == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------- launchers

LAUNCHED = """
import os, signal, subprocess, sys, time
print("argv", sys.argv[1:], "cwd", os.getcwd(), "var", os.environ["FI_VAR"])
print("path0", sys.path[0], flush=True)  # before a SIGKILL
mode = sys.argv[1]
if mode == "raise":
    raise ValueError("boom")
if mode == "exit":
    sys.exit(3)
if mode == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if mode == "sleep":
    child = subprocess.Popen(["sleep", "1000"])
    with open(sys.argv[2], "w") as f:
        f.write(str(child.pid))
    time.sleep(1000)
"""


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        # Reaped between the open and the read: gone too.
        return False


@pytest.mark.parametrize("use_zygote", [True, False])
def test_launcher_runs_scripts_like_python(tmp_path, use_zygote,
                                           no_leftovers):
    script = tmp_path / "launched.py"
    script.write_text(LAUNCHED)
    work = tmp_path / "work"
    work.mkdir()
    program = Program([str(script), "{run_dir}"], str(work))
    launcher = Launcher(program, use_zygote, str(tmp_path / "zygote.log"))
    assert (launcher.zygote is not None) == use_zygote
    try:
        launcher.wait_ready()
        ends = {}
        for mode in ("ok", "raise", "exit", "kill"):
            program.args = [mode]
            out, err = tmp_path / f"{mode}.out", tmp_path / f"{mode}.err"
            run = launcher.spawn("/run", {"FI_VAR": mode}, str(out), str(err))
            assert run.wait(60)
            ends[mode] = run.returncode
            assert out.read_text().startswith(
                f"argv ['{mode}'] cwd {work} var {mode}\npath0 {tmp_path}\n")
        assert ends == {"ok": 0, "raise": 1, "exit": 3, "kill": -9}
        assert (tmp_path / "raise.err").read_text().rstrip().endswith(
            "ValueError: boom")
        # A run killed on timeout takes its whole process group with it.
        program.args = ["sleep", str(tmp_path / "sleeper")]
        run = launcher.spawn("/run", {"FI_VAR": "s"}, str(tmp_path / "s.out"),
                             str(tmp_path / "s.err"))
        deadline = time.monotonic() + 60
        while not (tmp_path / "sleeper").exists() or \
                not (tmp_path / "sleeper").read_text():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        sleeper = int((tmp_path / "sleeper").read_text())
        assert not run.wait(0.2)
        run.kill()
        # A subprocess run is asked to stop first (SIGTERM, which a
        # launcher such as torchrun passes on), then killed.
        assert run.wait(10) and run.returncode == (
            -9 if use_zygote else -15)
        deadline = time.monotonic() + 10
        while _alive(sleeper):
            assert time.monotonic() < deadline, "the grandchild survived"
            time.sleep(0.02)
    finally:
        launcher.close()


def test_zygote_close_kills_running_runs(tmp_path, no_leftovers):
    script = tmp_path / "launched.py"
    script.write_text(LAUNCHED)
    program = Program([str(script), "sleep", str(tmp_path / "pid")],
                      str(tmp_path))
    launcher = Launcher(program, True, str(tmp_path / "zygote.log"))
    launcher.wait_ready()
    run = launcher.spawn("/run", {"FI_VAR": "x"}, str(tmp_path / "o"),
                         str(tmp_path / "e"))
    deadline = time.monotonic() + 60
    while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    launcher.close()
    assert run.returncode == -9
    assert not _alive(int((tmp_path / "pid").read_text()))


# ------------------------------------------------ campaigns (real daemons)

def campaign(tmp_path, program, *options, runs=8, name="campaign"):
    """Runs a campaign of `runs` runs; returns (store, records)."""
    store = CampaignDir(tmp_path / name)
    code = main(["run", "--dir", store.path, "--runs", str(runs), "--jobs",
                 "2", "--quiet", "--no-plots", *options, "--", *program])
    assert code == 0
    records = store.read_runs()
    assert [record["run"] for record in records] == list(range(runs))
    return store, records


def outcomes(records):
    return [record["outcome"] for record in records]


DEVICE_PROGRAM = """
import sys
import torch
x = torch.arange(8, dtype=torch.float32, device="openreg")
y = (x * 2 + 1).sum()
print("result", y.item(), "threads", torch.get_num_threads())
"""


@pytest.fixture
def device_program(tmp_path):
    path = tmp_path / "device_program.py"
    path.write_text(DEVICE_PROGRAM)
    return str(path)


def test_corrected_errors_are_masked(tmp_path, device_program, no_leftovers):
    store, records = campaign(tmp_path, [device_program], "--model",
                              "corrected_error")
    assert outcomes(records) == ["Masked"] * 8
    assert all(record["fired"] for record in records)
    assert all(r["records"][0]["model"] == "corrected_error" for r in records)
    golden = store.load_golden()
    assert golden["compare"] == "stdout"
    assert any(entry["op"] == "aten::mul.Tensor" for entry in golden["profile"])
    # --threads (default 1) reaches the program through the zygote.
    with open(os.path.join(store.golden_dir(0), "stdout.txt")) as stdout:
        assert stdout.read() == "result 64.0 threads 1\n"


def test_kernel_failure_is_due(tmp_path, device_program, no_leftovers):
    _, records = campaign(tmp_path, [device_program], "--model",
                          "kernel_failure", "--op", "aten::mul.Tensor")
    assert outcomes(records) == ["DUE"] * 8
    for record in records:
        assert record["fired"] and record["returncode"] == 1
        assert record["records"][0]["command"] == "aten::mul.Tensor"
        assert record["error"], record


FILE_PROGRAM = """
import sys
import torch
x = torch.arange(8, dtype=torch.float32, device="openreg")
with open(sys.argv[1], "w") as out:
    out.write(f"sum {(x * 3).sum().item()}\\n")
"""


def test_output_file_is_compared(tmp_path, no_leftovers):
    program = tmp_path / "file_program.py"
    program.write_text(FILE_PROGRAM)
    store, records = campaign(
        tmp_path, [str(program), "{run_dir}/out.txt"], "--output-file",
        "{run_dir}/out.txt", "--model", "corrupt_output", "--op",
        "aten::mul.Tensor", "--bits", "30", runs=2)
    assert store.load_config()["compare"] == "file"
    with open(os.path.join(store.golden_dir(0), "out.txt")) as out:
        assert out.read() == "sum 84.0\n"
    # Bit 30 of one of the products: the written sum is wrong.
    assert outcomes(records) == ["SDC"] * 2
    assert all(r["detail"].startswith("output line 1:") for r in records)


HANG_OR_CRASH = """
import os, signal, subprocess, sys, time
import torch
print((torch.ones(4, device="openreg") + 1).sum().item())
if not os.environ["OPENREG_FI_RUN"].startswith("golden"):
    if sys.argv[1] == "hang":
        sleeper = subprocess.Popen(["sleep", "1000"])
        with open(os.path.join(sys.argv[2], "sleeper"), "w") as f:
            f.write(str(sleeper.pid))
        time.sleep(1000)
    os.kill(os.getpid(), signal.SIGKILL)
"""


# A fresh interpreter (--no-zygote) needs seconds to import torch and run
# its first op (about 6 s on a loaded 2-core machine): the timeout, which
# bounds the golden runs too, must leave room for it.
@pytest.mark.parametrize("zygote, timeout", [(True, 2), (False, 20)])
def test_runs_that_never_end_are_hangs(tmp_path, zygote, timeout,
                                       no_leftovers):
    program = tmp_path / "hang_or_crash.py"
    program.write_text(HANG_OR_CRASH)
    store, records = campaign(
        tmp_path, [str(program), "hang", "{run_dir}"], "--model",
        "corrected_error", "--timeout", str(timeout), runs=2,
        *([] if zygote else ["--no-zygote"]))
    assert outcomes(records) == ["Hang"] * 2
    for record in records:
        assert timeout <= record["seconds"] < timeout + 2
        with open(os.path.join(store.run_dir(record["run"]), "sleeper")) as f:
            assert not _alive(int(f.read()))


def test_runs_killed_by_a_signal_are_crashes(tmp_path, no_leftovers):
    program = tmp_path / "hang_or_crash.py"
    program.write_text(HANG_OR_CRASH)
    _, records = campaign(tmp_path, [str(program), "crash"], "--model",
                          "corrected_error", runs=4)
    assert outcomes(records) == ["Crash"] * 4
    assert {record["detail"] for record in records} == {"killed by SIGKILL"}


def test_hung_kernel_is_a_hang(tmp_path, device_program, no_leftovers):
    _, records = campaign(tmp_path, [device_program], "--model", "hang",
                          "--timeout", "3", runs=2)
    assert outcomes(records) == ["Hang"] * 2


# Kernels of the worked example with float32 outputs (bool and index
# outputs have other widths and meanings).
FLOAT_OPS = "aten::addmm,aten::convolution,aten::_log_softmax"


def test_exponent_flips_are_sdc_or_due_and_low_mantissa_flips_masked(
        tmp_path, no_leftovers):
    options = ["--op", FLOAT_OPS, "--phase", "forward", "--seed", "1"]
    store, high = campaign(tmp_path, [EXAMPLE], "--bits", "30", *options,
                           runs=12, name="high")
    assert store.load_golden()["compare"] == "report"
    assert all(record["fired"] for record in high)
    assert all(record["records"][0]["bits"] == [30] and
               record["records"][0]["dtype"] == "Float" for record in high)
    # The top exponent bit: huge values (non-finite logits or loss, which
    # the program detects: DUE) or tiny ones (wrong numbers: SDC), unless
    # a ReLU or max-pool drops the element.
    bad = sum(record["outcome"] in ("SDC", "DUE") for record in high)
    assert bad >= 8, outcomes(high)
    assert "DUE" in outcomes(high) and "SDC" in outcomes(high)
    # The lowest mantissa bits change values by < 1e-6 relative: within
    # the tolerance, the output is unchanged.
    _, low = campaign(tmp_path, [EXAMPLE], "--bits", "0-3", "--rtol",
                      "1e-4", *options, runs=12, name="low")
    assert all(record["records"][0]["bits"][0] <= 3 for record in low)
    assert outcomes(low) == ["Masked"] * 12


def test_phase_targeting(tmp_path, no_leftovers):
    for phase in ("backward", "optimizer"):
        _, records = campaign(tmp_path, [EXAMPLE], "--model",
                              "corrected_error", "--phase", phase, runs=4,
                              name=phase)
        assert {r["fault"]["trigger"]["phase"] for r in records} == {phase}
        assert {r["records"][0]["phase"] for r in records} == {phase}


def test_resume_report_and_replay(tmp_path, capsys, no_leftovers):
    # No run here hangs: a timeout well above the default (10 x a 0.2 s
    # program + 5 s) keeps a run slowed by the other test targets on the
    # machine from counting as one.
    options = ["--model", "corrupt_output,kernel_failure", "--bits", "30",
               "--seed", "5", "--timeout", "60"]
    store, first = campaign(tmp_path, [EXAMPLE], *options, runs=4)
    # Continuing: only the missing runs execute; the first ones stay.
    _, records = campaign(tmp_path, [EXAMPLE], *options, runs=8)
    assert records[:4] == first
    assert {r["model"] for r in records} == {"corrupt_output",
                                             "kernel_failure"}
    # Resuming without the program uses the stored campaign; a changed
    # flag is refused.
    assert main(["run", "--dir", store.path, "--runs", "8", "--quiet"]) == 0
    with pytest.raises(SystemExit):
        main(["run", "--dir", store.path, "--runs", "9", "--seed", "6"])
    assert "--seed: this campaign was created with 5" in \
        capsys.readouterr().err
    assert len(store.read_runs()) == 8
    # The report: text, JSON, plots.
    capsys.readouterr()
    assert main(["report", store.path]) == 0
    text = capsys.readouterr().out
    assert "outcome" in text and "95% CI" in text
    summary = json.loads(open(store.file("summary.json")).read())
    assert summary["runs"] == 8
    assert os.path.exists(store.file("outcomes_by_model.png"))
    # Replay: the same fault gives the same outcome.
    sdc_or_due = next(r for r in records if r["outcome"] != "Masked")
    assert main(["replay", store.path, str(sdc_or_due["run"])]) == 0
    out = capsys.readouterr().out
    assert f"outcome: {sdc_or_due['outcome']}" in out
    assert "(same)" in out


def test_interrupted_campaign_resumes(tmp_path, no_leftovers):
    store = CampaignDir(tmp_path / "c")
    command = [sys.executable, "-m", "torch_openreg.fi", "run", "--dir",
               store.path, "--runs", "24", "--jobs", "2", "--no-plots",
               "--model", "corrected_error", "--", EXAMPLE]
    runner = subprocess.Popen(command, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(store.read_runs() if store.exists() else []) < 3:
            assert runner.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        runner.send_signal(signal.SIGINT)
        _, err = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    assert runner.returncode == 130, err
    assert "rerun the same command to continue" in err
    done = len(store.read_runs())
    assert 3 <= done < 24
    finished = subprocess.run(command, capture_output=True, text=True,
                              timeout=600)
    assert finished.returncode == 0, finished.stderr
    assert outcomes(store.read_runs()) == ["Masked"] * 24
    assert "runs/min" in finished.stdout


def test_bad_plan_fields_stop_the_campaign(tmp_path, device_program, capsys,
                                           no_leftovers):
    code = main(["run", "--dir", str(tmp_path / "c"), "--runs", "2",
                 "--quiet", "--model", "hang", "--model-args",
                 '{"seconds": -1}', "--", device_program])
    assert code == 1
    err = capsys.readouterr().err
    assert "openreg-daemon exited with status 2 at start" in err
    assert "seconds" in err


def test_golden_failure_is_reported(tmp_path, capsys, no_leftovers):
    program = tmp_path / "fails.py"
    program.write_text("import torch\ntorch.ones(1, device='openreg')\n"
                       "raise SystemExit('golden failure')\n")
    code = main(["run", "--dir", str(tmp_path / "c"), "--quiet", "--",
                 str(program)])
    assert code == 1
    assert "the fault-free run 0 failed (DUE: exit status 1: golden " \
        "failure)" in capsys.readouterr().err
    assert not CampaignDir(tmp_path / "c").exists()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
