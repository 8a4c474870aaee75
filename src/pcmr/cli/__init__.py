"""The ``pcmr`` command line: ``train``, ``evaluate``, ``search``, ``serve``, ``demo``, ``list``, ``study``,
``convert``.

Each subcommand lives in its own module of this package, imported by name from
:data:`COMMANDS`, and exposes ``add_parser(subparsers)`` (registers its parser)
and ``run(args) -> int`` (does the work). Building the parser imports every command
module, and a module imports the parts of the library it uses at its top (their
registries give the parsers' choices), so ``pcmr --help`` loads the library; a module
that is not installed leaves its command listed as unavailable.

Errors a user can cause end the program with one line on stderr saying what is
wrong and what is accepted, and a non-zero exit status (2 for bad input, 1 for
other failures). ``--debug`` shows the full traceback instead. A command's ``--device`` is checked
before the command runs (:func:`pcmr.device.resolve_device`), so a device this machine lacks gives the
same one line in every command.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from pcmr import __version__
from pcmr.device import resolve_device
from pcmr.train.checkpoint import CheckpointError

__all__ = ["COMMANDS", "main"]

# command name -> module of pcmr.cli implementing it
COMMANDS: dict[str, str] = {
    "train": "train",
    "evaluate": "evaluate",
    "search": "search",
    "serve": "serve",
    "demo": "demo",
    "list": "listing",
    "study": "study",
    "convert": "convert",
}

EXIT_BAD_INPUT = 2
EXIT_FAILURE = 1


def _load_command(module_name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"pcmr.cli.{module_name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"pcmr.cli.{module_name}":
            return None
        raise


class CommandUnavailableError(RuntimeError):
    """The module implementing a command is not part of this installation."""


def _missing_command(name: str, module_name: str) -> None:
    raise CommandUnavailableError(
        f"the '{name}' command is not available in this installation (module pcmr.cli.{module_name} is missing)"
    )


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one sub-parser per available command."""
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show full tracebacks on errors"
    )
    parser = argparse.ArgumentParser(
        prog="pcmr",
        description="Probabilistic cross-modal retrieval: train, evaluate and search Gaussian embeddings.",
        parents=[debug],
    )

    parser.add_argument("--version", action="version", version=f"pcmr {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name, module_name in COMMANDS.items():
        module = _load_command(module_name)
        if module is None:
            sub = subparsers.add_parser(name, help=f"(unavailable: pcmr.cli.{module_name} is not installed)")
            sub.set_defaults(_run=lambda args, n=name, m=module_name: _missing_command(n, m))
            continue
        sub = module.add_parser(subparsers)
        if not any("--debug" in action.option_strings for action in sub._actions):
            sub.add_argument(
                "--debug",
                action="store_true",
                default=argparse.SUPPRESS,
                help="show full tracebacks on errors",
            )
        sub.set_defaults(_run=module.run)
    return parser


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        text = str(exc.args[0])
    return text


def _is_bad_input(exc: BaseException) -> bool:
    return isinstance(
        exc,
        (
            ValueError,
            TypeError,
            KeyError,
            FileNotFoundError,
            FileExistsError,
            NotADirectoryError,
            CheckpointError,
            CommandUnavailableError,
        ),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pcmr`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    debug = bool(getattr(args, "debug", False))
    try:
        if getattr(args, "device", None) is not None:  # every command's --device, checked one way
            resolve_device(args.device, what="--device")
        status = args._run(args)
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"pcmr {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            raise
        hint = "" if _is_bad_input(exc) else " (run with --debug for the traceback)"
        print(f"pcmr {args.command}: error: {_one_line(exc)}{hint}", file=sys.stderr)
        return EXIT_BAD_INPUT if _is_bad_input(exc) else EXIT_FAILURE
    return int(status or 0)


if __name__ == "__main__":
    sys.exit(main())
