"""Run the pipeline under a named profile (``profiles/NAME.yaml``) as a DVC experiment.

    python -m stages.profile smoke            # dvc exp run --temp --set-param ... (params.yaml is not edited)
    python -m stages.profile smoke --print    # show the dvc command only

The profile's overrides are validated against the schema first (a bad key fails before DVC starts), then passed
to ``dvc exp run --temp`` as ``--set-param`` options, so the run happens in a temporary copy of the workspace,
``params.yaml`` is never edited and ``dvc exp show`` lists the run. ``dvc exp apply NAME`` brings its results into
the workspace.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from bert_pipeline.console import run_main
from bert_pipeline.errors import PipelineError
from stages.params import DEFAULT_PARAMS, flatten, load_params, read_yaml

log = logging.getLogger(__name__)

PROFILES_DIR = Path("profiles")


def available_profiles(profiles_dir: Path = PROFILES_DIR) -> list[str]:
    """Names of the profiles in ``profiles_dir`` (file stems of ``*.yaml``)."""
    return sorted(p.stem for p in profiles_dir.glob("*.yaml"))


def load_profile(name: str, profiles_dir: Path = PROFILES_DIR) -> dict[str, Any]:
    """Return the flattened dotted-key overrides of profile ``name``.

    Raises:
        PipelineError: unknown profile name or a file that is not a mapping.
    """
    path = profiles_dir / f"{name}.yaml"
    if not path.exists():
        raise PipelineError(f"unknown profile {name!r}: expected one of {', '.join(available_profiles(profiles_dir))}")
    raw = read_yaml(path) or {}
    if not isinstance(raw, dict):
        raise PipelineError(f"{path}: expected a mapping of params overrides, got {type(raw).__name__}")
    return flatten(raw)


def set_param_args(overrides: dict[str, Any]) -> list[str]:
    """``--set-param key=value`` arguments for ``dvc exp run`` (values as JSON, which DVC's YAML parser reads)."""
    args: list[str] = []
    for key, value in overrides.items():
        args += ["--set-param", f"{key}={json.dumps(value)}"]
    return args


def profile_command(name: str, extra: list[str] | None = None, params_path: Path = DEFAULT_PARAMS) -> list[str]:
    """The ``dvc exp run`` command for profile ``name``, after validating the merged params.

    Raises:
        PipelineError: unknown profile.
        ParamsError: the profile names a key the schema does not have, or gives a wrong type.
    """
    overrides = load_profile(name)
    load_params(params_path, overrides)  # fail early with the schema's one-line message
    return ["dvc", "exp", "run", "--temp", *set_param_args(overrides), *(extra or [])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", help="profile name (a file in profiles/)")
    parser.add_argument("--print", action="store_true", help="print the dvc command instead of running it")
    args, extra = parser.parse_known_args()  # anything else goes to dvc exp run (e.g. -n NAME)
    extra = [a for a in extra if a != "--"]
    cmd = profile_command(args.name, extra)
    if args.print:
        sys.stdout.write(shlex.join(cmd) + "\n")
        return
    log.info("running: %s", shlex.join(cmd))
    proc = subprocess.run(cmd)
    if proc.returncode != 0:
        raise PipelineError(f"profile {args.name}: dvc exp run failed with exit code {proc.returncode}")


if __name__ == "__main__":
    run_main(main)
