"""A campaign folder:

    config.json    the campaign's configuration (config.py)
    golden.json    the fault-free runs: output, profile, times, timeout
    golden/K/      fault-free run K's stdout.txt, stderr.txt, result.jsonl,
                   daemon.log
    runs.jsonl     one JSON record per finished run, in completion order
    runs/NNNNNN/   run N's plan.json, stdout.txt, stderr.txt, result.jsonl,
                   daemon.log
    replay/NNNNNN/ the same, for `openreg-fi replay DIR N`
    summary.txt, summary.json, *.png   written by `openreg-fi report`
    zygote.log     the zygote's stderr

Records are appended one line per write; a line torn by a crash is cut off
when the campaign is read again, so a campaign resumes after any stop.
"""

import json
import os
import shutil

__all__ = ["CampaignDir"]


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def _write_json(path, value):
    temporary = path + ".tmp"
    with open(temporary, "w") as f:
        json.dump(value, f, indent=1)
        f.write("\n")
    os.replace(temporary, path)


class CampaignDir:
    def __init__(self, path):
        self.path = os.path.abspath(path)

    def file(self, name):
        return os.path.join(self.path, name)

    def exists(self):
        return os.path.exists(self.file("config.json"))

    def load_config(self):
        return _read_json(self.file("config.json"))

    def save_config(self, config):
        os.makedirs(self.path, exist_ok=True)
        _write_json(self.file("config.json"), config)

    def load_golden(self):
        return _read_json(self.file("golden.json"))

    def save_golden(self, golden):
        _write_json(self.file("golden.json"), golden)

    def golden_dir(self, index, fresh=False):
        return self._folder(fresh, "golden", str(index))

    def run_dir(self, index, fresh=False):
        return self._folder(fresh, "runs", f"{index:06d}")

    def replay_dir(self, index, fresh=False):
        return self._folder(fresh, "replay", f"{index:06d}")

    def _folder(self, fresh, *parts):
        """The folder (created); `fresh`: emptied first, so nothing of an
        interrupted attempt can pass for this one's output."""
        folder = os.path.join(self.path, *parts)
        if fresh:
            shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder, exist_ok=True)
        return folder

    def read_runs(self):
        """The recorded runs, sorted by index (the last record of an index
        wins); cuts off a torn last line."""
        path = self.file("runs.jsonl")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        if end < len(data):
            with open(path, "r+b") as f:
                f.truncate(end)
        records = {}
        for line in data[:end].splitlines():
            record = json.loads(line)
            records[record["run"]] = record
        return [records[index] for index in sorted(records)]

    def append_run(self, record):
        with open(self.file("runs.jsonl"), "a") as f:
            f.write(json.dumps(record) + "\n")
