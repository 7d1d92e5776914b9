"""The ``probe`` command line: a thin click layer over the public library functions.

Each command lives in its own module under ``app/cli/`` and is listed in
``COMMAND_MODULES``; heavy imports happen inside the command bodies.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

# module name under probe.app.cli -> the click command objects it defines (attribute names)
COMMAND_MODULES = [
    "core",
    "report",
    "roles",
    "syntax",
    "flow",
    "ablation",
    "faithfulness",
    "complexity",
    "paper",
    "zoo",
    "store",
]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="attention-probe")
def main():
    """Attention interpretability toolkit: capture, analyse and report attention heads."""
    # the command line speaks for itself: no transformers progress bars or advisories
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if "transformers" in sys.modules:  # already imported (notebooks, tests): tell it directly
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()


for _name in COMMAND_MODULES:
    try:
        _mod = importlib.import_module(f"probe.app.cli.{_name}")
    except ModuleNotFoundError as exc:  # only a command module absent from this checkout
        if exc.name != f"probe.app.cli.{_name}":
            raise
        continue
    for _cmd in getattr(_mod, "COMMANDS", []):
        main.add_command(_cmd)
