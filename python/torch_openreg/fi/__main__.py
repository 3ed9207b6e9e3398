"""openreg-fi: fault-injection campaigns on whole PyTorch programs.

    openreg-fi run --dir DIR [--runs N] [--jobs J] [fault and compare
                   options] -- PROGRAM [ARGS...]
    openreg-fi report DIR [--no-plots]
    openreg-fi replay DIR RUN

`run` profiles the program in fault-free runs, then runs it N times with
one fault each and classifies every run (Masked, SDC, DUE, Hang, Crash);
rerunning it on the same DIR continues the campaign. See
docs/FAULT_INJECTION.md.
"""

import argparse
import os
import sys
import time

from torch_openreg.fi.config import DEFAULTS, MODELS, ConfigError, resolve

__all__ = ["main"]


def _config_flags(parser):
    """The campaign-defining flags; default None = "not given" (resolve()
    fills in the stored or default value)."""
    group = parser.add_argument_group(
        "campaign (stored in DIR/config.json; must match when resuming)")
    add = group.add_argument
    add("--model", dest="models", metavar="MODEL[,MODEL...]",
        help=f"fault model(s), used in turn by successive runs: "
             f"{', '.join(MODELS)} (default corrupt_output)")
    add("--kind", help="command kind the fault targets, for models of any "
        "command (default kernel)")
    add("--op", dest="ops", metavar="GLOB[,GLOB...]",
        help="only kernels of these ops: aten::add.Tensor, aten::add (every "
             "overload) or a glob (aten::*conv*)")
    add("--device", type=int, help="only commands on this device")
    add("--phase", help="only commands launched in this phase: forward, "
        "backward or optimizer")
    add("--bits", metavar="LO-HI", help="bit positions corrupted (or the "
        "stuck bit drawn from), 0 = least significant (default: any)")
    add("--bit-count", type=int, help="bits flipped per element (default 1)")
    add("--pattern", help="corruption: bit_flip (default), random_value, "
        "zero")
    add("--model-args", metavar="JSON",
        help="extra fields of the model message, e.g. '{\"seconds\": 2}' "
             "for hang; with several models '{\"hang\": {...}, ...}'")
    add("--seed", type=int, help="campaign seed (default 0); run i's fault "
        "depends only on it and i")
    add("--timeout", type=float, help="seconds before a run counts as Hang "
        "(default 10 x the golden run + 5)")
    add("--rtol", type=float, help="relative tolerance of output numbers "
        "(default 0: exact)")
    add("--atol", type=float, help="absolute tolerance (default 0)")
    add("--compare", help="output compared: auto (default: reported values "
        "if the program reports any, else stdout), report, stdout, file")
    add("--output-file", metavar="PATH", help="compare this file the "
        "program writes ({run_dir} is the run's folder)")
    add("--devices", type=int, help="devices of each daemon (default 2)")
    add("--memory-per-device", help="memory of each device (default 2GiB)")
    add("--golden-runs", type=int, help="fault-free runs; their outputs "
        "must agree (default 2)")
    add("--threads", type=int, help="intra-op threads (OMP_NUM_THREADS) of "
        "every daemon and program (default 1: parallel runs instead)")


def _parser():
    parser = argparse.ArgumentParser(
        prog="openreg-fi", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", required=True)
    run = actions.add_parser(
        "run", help="run or resume a campaign (program after `--`)",
        usage="openreg-fi run --dir DIR [options] -- PROGRAM [ARGS...]")
    run.add_argument("--dir", required=True, help="campaign folder")
    run.add_argument("--runs", type=int, default=100,
                     help="runs in the campaign (default 100)")
    run.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                     help="runs at a time (default: the CPU count)")
    run.add_argument("--no-zygote", action="store_true",
                     help="start every run as a fresh subprocess")
    run.add_argument("--quiet", action="store_true",
                     help="no progress line and no summary")
    run.add_argument("--no-plots", action="store_true",
                     help="no PNG plots in the final report")
    _config_flags(run)
    report = actions.add_parser("report", help="summarize a campaign")
    report.add_argument("dir", help="campaign folder")
    report.add_argument("--no-plots", action="store_true",
                        help="text and JSON only")
    replay = actions.add_parser("replay", help="rerun one run exactly")
    replay.add_argument("dir", help="campaign folder")
    replay.add_argument("run", type=int, help="the run's index")
    return parser, {"run": run, "report": report, "replay": replay}


def _run(args, command):
    from torch_openreg.fi.campaign import run_campaign
    from torch_openreg.fi.summary import write_report
    from torch_openreg.fi.store import CampaignDir

    if args.runs < 0:
        raise ConfigError("--runs", "expected an integer >= 0")
    if args.jobs < 1:
        raise ConfigError("--jobs", "expected an integer >= 1")
    store = CampaignDir(args.dir)
    given = {key: getattr(args, key) for key in DEFAULTS
             if key not in ("command", "cwd")}
    if command:
        given.update(command=command, cwd=os.getcwd())
    config = resolve(given, store.load_config())
    started = time.monotonic()
    done, rate = run_campaign(store, config, args.runs, args.jobs,
                              not args.no_zygote, args.quiet)
    elapsed = time.monotonic() - started
    text = write_report(store, plots=not args.no_plots)
    if not args.quiet:
        print(text, end="")
        if done:
            print(f"{done} runs in {elapsed:.1f} s, start-up and golden "
                  f"runs included; injection runs: {rate:.1f} runs/min. "
                  f"Report in {store.path}")
    return 0


def _report(args):
    from torch_openreg.fi.summary import write_report
    from torch_openreg.fi.store import CampaignDir

    store = CampaignDir(args.dir)
    if not store.exists():
        raise ConfigError("DIR", f"{store.path} holds no campaign")
    print(write_report(store, plots=not args.no_plots), end="")
    return 0


def _replay(args):
    from torch_openreg.fi.replay import replay
    from torch_openreg.fi.store import CampaignDir

    record, recorded = replay(CampaignDir(args.dir), args.run)
    return 0 if recorded is None or \
        recorded["outcome"] == record["outcome"] else 1


def main(argv=None):
    """Console script `openreg-fi`; returns the exit status."""
    from torch_openreg.fi.daemons import DaemonError
    from torch_openreg.fi.golden import CampaignError
    from torch_openreg.fi.zygote import ZygoteError

    argv = list(sys.argv[1:] if argv is None else argv)
    command = []
    if "--" in argv:
        split = argv.index("--")
        argv, command = argv[:split], argv[split + 1:]
    parser, actions = _parser()
    args, unknown = parser.parse_known_args(argv)
    action = actions[args.action]
    if unknown:
        action.error(f"unrecognized arguments: {' '.join(unknown)} (the "
                     "program goes after `--`)")
    if command and args.action != "run":
        action.error("only `run` takes a program")
    try:
        if args.action == "run":
            return _run(args, command)
        return _report(args) if args.action == "report" else _replay(args)
    except ConfigError as error:
        action.error(str(error))
    except (CampaignError, DaemonError, ZygoteError) as error:
        print(f"openreg-fi {args.action}: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\nopenreg-fi {args.action}: interrupted; finished runs are "
              "recorded: rerun the same command to continue",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
