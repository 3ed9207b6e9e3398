"""`openreg-fi replay DIR RUN`: runs one run of a campaign again, with the
fault of its record (or, for a run not done yet, the fault the campaign
would give it), as a plain subprocess in DIR/replay/RUN, and compares the
outcome with the recorded one."""

import json

from torch_openreg.fi.campaign import make_record, start_fault_daemon
from torch_openreg.fi.execution import campaign_env, execute
from torch_openreg.fi.faults import fault_for_run, populations
from torch_openreg.fi.golden import CampaignError, golden_output
from torch_openreg.fi.launch import Launcher, Program

__all__ = ["describe_firing", "replay"]


def describe_firing(firing):
    """One line for a FaultRecord."""
    text = (f"{firing.get('model', '?')} on {firing.get('command', '?')} "
            f"(device {firing.get('device', 0)}, "
            f"{firing.get('phase') or 'no phase'}, "
            f"match {firing.get('match', '?')})")
    if firing.get("bits"):
        text += (f": element {firing.get('element')} bits {firing['bits']} "
                 f"{firing.get('value_before')} -> {firing.get('value_after')}")
    if firing.get("message"):
        text += f": {firing['message']}"
    return text


def replay(store, index):
    """Reruns run `index`; returns (record, recorded or None) and prints
    what happened."""
    config, golden = store.load_config(), store.load_golden()
    if config is None or golden is None:
        raise CampaignError(f"{store.path} holds no campaign (config.json "
                            "and golden.json are made by `openreg-fi run`)")
    recorded = {record["run"]: record
                for record in store.read_runs()}.get(index)
    spec = recorded["fault"] if recorded else fault_for_run(
        config, populations(config, golden["profile"]), index)
    run_dir = store.replay_dir(index, fresh=True)
    launcher = Launcher(Program(config["command"], config["cwd"]),
                        use_zygote=False, zygote_log=None,
                        env=campaign_env(config))
    daemon = start_fault_daemon(config, spec, run_dir, golden["timeout"])
    try:
        execution = execute(launcher, daemon, run_dir, str(index),
                            golden["timeout"])
        record = make_record(config, golden,
                             golden_output(store, config, golden), index,
                             spec, daemon, run_dir, execution)
    finally:
        daemon.stop()
    print(f"run {index}: {json.dumps(spec)}")
    for firing in record["records"]:
        print(f"fired: {describe_firing(firing)}")
    if record["fired"] is False:
        print("fired: never (the targeted command did not run)")
    detail = f" ({record['detail']})" if record["detail"] else ""
    print(f"outcome: {record['outcome']}{detail}")
    if recorded is not None:
        same = "same" if recorded["outcome"] == record["outcome"] else \
            "DIFFERENT"
        print(f"recorded: {recorded['outcome']} ({same})")
    print(f"files: {run_dir}/ (stdout.txt, stderr.txt, plan.json, "
          "daemon.log)")
    return record, recorded
