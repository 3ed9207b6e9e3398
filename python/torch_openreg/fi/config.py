"""A campaign's configuration: everything that decides its runs' faults and
outcomes, checked once, stored as config.json in the campaign folder and
compared when the campaign is resumed.

The configuration is a plain dict (JSON names below). `runs`, `jobs` and
`zygote` are not part of it: a campaign may be extended, or resumed with
another parallelism or launcher, without changing what its runs mean.
"""

import json
import os

__all__ = ["ConfigError", "DEFAULTS", "FLAGS", "MODELS", "PHASES",
           "corruption_models", "model_kind", "resolve"]


def _plan_vocabulary():
    """The plan's words, from protos/faults.proto (data_plane/fault_plan.h):
    written once there, read here."""
    import torch  # loads torch_openreg through the backend autoload
    return torch.openreg.faults.vocabulary()


_VOCABULARY = _plan_vocabulary()
# Every fault model, with the command kind its trigger targets; None: any
# command may trigger it (sampled among kernels unless --kind says
# otherwise).
MODELS = {model["name"]: None if model["kind"] == "any" else model["kind"]
          for model in _VOCABULARY["models"]}
# The kinds each model with a kind of its own can also act on
# (corrupt_input / corrupt_output: a collective's contribution / delivery).
MODEL_KINDS = {model["name"]: tuple(model.get("kinds", [model["kind"]]))
               for model in _VOCABULARY["models"]}
# The kinds of command that have an op (kernels: the ATen op; collectives:
# "occl::all_reduce", ...).
OP_KINDS = ("kernel", "collective")
# "any": every command (the population counts them all).
KINDS = tuple(_VOCABULARY["kinds"])
PHASES = tuple(_VOCABULARY["phases"])
PATTERNS = tuple(_VOCABULARY["patterns"])
COMPARES = ("auto", "report", "stdout", "file")
_CORRUPTIONS = ("corrupt_output", "corrupt_copy", "corrupt_memory",
                "corrupt_input")

DEFAULTS = {
    "command": None,
    "cwd": None,
    "models": ["corrupt_output"],
    "kind": None,
    "ops": None,
    "device": None,
    "phase": None,
    "bits": None,
    "bit_count": 1,
    "pattern": "bit_flip",
    "model_args": {},
    "seed": 0,
    "timeout": None,
    "rtol": 0.0,
    "atol": 0.0,
    "compare": "auto",
    "output_file": None,
    "devices": 2,
    "memory_per_device": "2GiB",
    "golden_runs": 2,
    "threads": 1,
}
# The command-line flag of each key, for error messages.
FLAGS = {key: "--" + key.replace("_", "-") for key in DEFAULTS}
FLAGS.update(command="PROGRAM", cwd="the working directory", models="--model",
             ops="--op")


class ConfigError(ValueError):
    """A bad campaign setting; `flag` names the option at fault."""

    def __init__(self, flag, message):
        super().__init__(f"{flag}: {message}")
        self.flag = flag


def corruption_models(models):
    return [model for model in models if model in _CORRUPTIONS]


def model_kind(model, kind):
    """The command kind run faults of `model` target (--kind or the
    model's own)."""
    if MODELS[model] is None:
        return kind or "kernel"
    return kind if kind in MODEL_KINDS[model] else MODELS[model]


def parse_bits(text):
    """"LO-HI" or "N" -> [LO, HI]."""
    low, _, high = text.partition("-")
    try:
        bits = [int(low), int(high or low)]
    except ValueError:
        bits = None
    if bits is None or not 0 <= bits[0] <= bits[1] <= 63:
        raise ConfigError("--bits", "expected LO-HI (or one bit N) with "
                          f"0 <= LO <= HI <= 63, got {text!r}")
    return bits


def parse_models(text):
    models = [model.strip() for model in text.split(",") if model.strip()]
    unknown = [model for model in models if model not in MODELS]
    if not models or unknown:
        raise ConfigError("--model", f"unknown model {', '.join(unknown)!r}; "
                          f"choose from {', '.join(MODELS)}" if unknown else
                          "expected one model or a comma-separated list")
    return models


def parse_model_args(text, models):
    """--model-args: a JSON object of fields for the model's message, or
    one such object per model name."""
    try:
        value = json.loads(text)
    except ValueError as error:
        raise ConfigError("--model-args", f"not JSON: {error}") from None
    if not isinstance(value, dict):
        raise ConfigError("--model-args", "expected a JSON object")
    if value and all(key in MODELS for key in value):
        keyed = value
    else:
        keyed = {model: value for model in models}
    for model, fields in keyed.items():
        if model not in models:
            raise ConfigError("--model-args",
                              f"{model} is not among the --model list")
        if not isinstance(fields, dict):
            raise ConfigError("--model-args",
                              f"the fields of {model} must be a JSON object")
    return keyed


def _parse(key, value):
    """A command-line string (or a stored JSON value) as the config value."""
    if value is None or not isinstance(value, str):
        return value
    if key == "models":
        return parse_models(value)
    if key == "bits":
        return parse_bits(value)
    if key == "ops":
        return [op.strip() for op in value.split(",") if op.strip()]
    return value


def _check(config):
    """Cross-field checks; raises ConfigError naming the flag."""
    models = config["models"]
    if config["phase"] is not None and config["phase"] not in PHASES:
        raise ConfigError("--phase", f"expected one of {', '.join(PHASES)}, "
                          f"got {config['phase']!r}")
    if config["kind"] is not None:
        if config["kind"] not in KINDS:
            raise ConfigError("--kind", f"expected one of {', '.join(KINDS)}")
        fixed = [model for model in models if MODELS[model] is not None
                 and config["kind"] not in MODEL_KINDS[model]]
        if fixed:
            raise ConfigError("--kind", f"{fixed[0]} targets only "
                              f"{' and '.join(MODEL_KINDS[fixed[0]])} "
                              "commands")
    if config["ops"] is not None:
        if not config["ops"]:
            raise ConfigError("--op", "expected an op name or glob")
        others = [model for model in models
                  if model_kind(model, config["kind"]) not in OP_KINDS]
        if others:
            raise ConfigError("--op", f"only kernels and collectives have "
                              f"an op, and "
                              f"{others[0]} targets "
                              f"{model_kind(others[0], config['kind'])} "
                              "commands")
    bit_models = corruption_models(models) + (
        ["stuck_at"] if "stuck_at" in models else [])
    if config["bits"] is not None and not bit_models:
        raise ConfigError("--bits", "applies to the corrupt_* models and "
                          "stuck_at only")
    if config["bit_count"] != 1 or config["pattern"] != "bit_flip":
        flag = "--bit-count" if config["bit_count"] != 1 else "--pattern"
        if not corruption_models(models):
            raise ConfigError(flag, "applies to the corrupt_* models only")
    if not isinstance(config["bit_count"], int) or config["bit_count"] < 1:
        raise ConfigError("--bit-count", "expected an integer >= 1")
    if config["pattern"] not in PATTERNS:
        raise ConfigError("--pattern", f"expected one of {', '.join(PATTERNS)}")
    for key in ("rtol", "atol"):
        if config[key] < 0:
            raise ConfigError(FLAGS[key], "expected a number >= 0")
    if config["timeout"] is not None and config["timeout"] <= 0:
        raise ConfigError("--timeout", "expected seconds > 0")
    if config["seed"] < 0:
        raise ConfigError("--seed", "expected an integer >= 0")
    if config["devices"] < 1:
        raise ConfigError("--devices", "expected an integer >= 1")
    if config["device"] is not None and not \
            0 <= config["device"] < config["devices"]:
        raise ConfigError("--device", f"expected 0 to {config['devices'] - 1} "
                          f"(the daemon has --devices={config['devices']})")
    if config["threads"] < 1:
        raise ConfigError("--threads", "expected an integer >= 1")
    if config["golden_runs"] < 1:
        raise ConfigError("--golden-runs", "expected an integer >= 1")
    if config["compare"] not in COMPARES:
        raise ConfigError("--compare", f"expected one of {', '.join(COMPARES)}")
    if config["compare"] == "file" and not config["output_file"]:
        raise ConfigError("--compare", "file needs --output-file")
    if config["output_file"] and config["compare"] not in ("auto", "file"):
        raise ConfigError("--output-file", "is compared only with "
                          "--compare file")
    if not config["command"]:
        raise ConfigError("PROGRAM", "give the program after `--`, e.g. "
                          "`openreg-fi run --dir DIR -- train.py --epochs 1`")


def resolve(given, stored=None):
    """The campaign config from the flags `given` (key -> command-line
    string or value; None for flags not given) and the config stored by an
    earlier run of the same campaign (None for a new campaign). A given
    flag that disagrees with the stored config is an error; flags not given
    keep their stored (else default) values."""
    config = {}
    for key, default in DEFAULTS.items():
        value = _parse(key, given.get(key))
        if key == "model_args" and isinstance(value, str):
            models = _parse("models", given.get("models")) or (
                stored or DEFAULTS)["models"]
            value = parse_model_args(value, models)
        if stored is not None and value is not None and value != stored[key]:
            raise ConfigError(FLAGS[key], (
                f"this campaign was created with {json.dumps(stored[key])}, "
                f"not {json.dumps(value)}: use another --dir for a new "
                "campaign"))
        if value is None:
            value = stored[key] if stored is not None else default
        config[key] = value
    if config["cwd"] is None:
        config["cwd"] = os.getcwd()
    if config["compare"] == "auto" and config["output_file"]:
        config["compare"] = "file"
    _check(config)
    return config
