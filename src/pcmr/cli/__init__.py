"""The ``pcmr`` command line: ``train``, ``evaluate``, ``search``, ``serve``, ``demo``, ``list``, ``study``,
``convert``.

Each subcommand is two modules, named in :data:`COMMANDS`: its parser,
``pcmr.cli.parsers.<module>`` with ``add_parser(subparsers)``, and its run module,
``pcmr.cli.<module>`` with ``run(args) -> int`` (does the work). Only the parser of the command given
is imported (the others are listed from :data:`COMMANDS`' one-line help), and no parser imports torch
or a library module that does (the names and defaults they offer come from :mod:`pcmr.catalog`), so
``pcmr --version``, ``pcmr --help``, ``pcmr COMMAND --help`` and a refused argument answer at once.
The run module, and through it the library, is imported only once the arguments have been read;
``pcmr list`` reads the catalog and the recipe folders and loads no torch either.

Errors a user can cause end the program with one line on stderr saying what is
wrong and what is accepted, and a non-zero exit status (2 for bad input, 1 for
other failures). ``--debug`` shows the full traceback instead. A value argparse refuses
(``--batch-size 0``) prints a short usage line and the error, not the whole usage. Output piped into
a program that stops reading (``pcmr search ... | head``) ends quietly. A command's ``--device`` is
checked before the command runs (:func:`pcmr.device.resolve_device`), so a device this machine lacks
gives the same one line in every command.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

from pcmr import __version__
from pcmr.catalog import COMMANDS

__all__ = ["COMMANDS", "main"]

EXIT_BAD_INPUT = 2
EXIT_FAILURE = 1


def _load_module(dotted: str) -> ModuleType | None:
    """The module ``dotted``; None when it is not part of this installation (an import error inside it
    is raised)."""
    try:
        return importlib.import_module(dotted)
    except ModuleNotFoundError as exc:
        if exc.name == dotted:
            return None
        raise


class CommandUnavailableError(RuntimeError):
    """The module implementing a command is not part of this installation."""


def _missing_command(name: str, dotted: str) -> CommandUnavailableError:
    return CommandUnavailableError(
        f"the '{name}' command is not available in this installation (module {dotted} is missing)"
    )


def _run_command(args: argparse.Namespace) -> int:
    """Import the run module of the command parsed (``pcmr.cli.<module>``: the library, torch) and run it."""
    name = args.command
    dotted = f"pcmr.cli.{COMMANDS[name][0]}"
    module = _load_module(dotted)
    if module is None:
        raise _missing_command(name, dotted)
    return int(module.run(args) or 0)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are two lines: a short usage and the error (the full usage of a
    command runs to twenty lines and hides the one that matters). The sub-parsers a command's parser
    module adds are of this class too, made by argparse alone: no code of this module runs while a
    parser module builds its sub-parser."""

    #: the sub-parsers built, by command name (the top-level parser's, set by :func:`build_parser`)
    commands: dict[str, argparse.ArgumentParser]

    def error(self, message: str) -> NoReturn:
        positionals = " ".join(action.metavar if isinstance(action.metavar, str) else action.dest.upper()
                               for action in self._get_positional_actions()
                               if action.help is not argparse.SUPPRESS)
        usage = f"usage: {self.prog} [options]{' ' + positionals if positionals else ''}  (see {self.prog} --help)"
        self.exit(2, f"{usage}\n{self.prog}: error: {message}\n")

    def read(self, argv: Sequence[str]) -> argparse.Namespace:
        """``parse_args(argv)``, but an argument no parser takes is refused by the parser of the command
        given (``pcmr train --bogus``: the usage line of ``pcmr train``, not of ``pcmr``)."""
        parsed, extras = self.parse_known_args(argv)
        if extras:
            owner = self.commands.get(getattr(parsed, "command", None) or "", self)
            owner.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed


def _command_in(argv: Sequence[str]) -> str | None:
    """The command named on the command line: its first word not starting with ``-`` (the top-level
    options take no value), when it is one of :data:`COMMANDS`."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def build_parser(command: str | None = None) -> _Parser:
    """The top-level parser. The sub-parser of ``command`` is built by its parser module
    (``pcmr.cli.parsers.<module>``, imported now; torch-free); every other command gets a placeholder
    carrying its help line, so its parser is not imported (``""``: placeholders only, enough for
    ``--help`` and ``--version``). With ``command=None`` every command's parser module builds its own
    sub-parser (the complete parser). No run module is imported here."""
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show full tracebacks on errors"
    )
    parser = _Parser(
        prog="pcmr",
        description="Probabilistic cross-modal retrieval: train, evaluate and search Gaussian embeddings.",
        parents=[debug],
    )
    parser.commands = {}

    parser.add_argument("--version", action="version", version=f"pcmr {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name, (module_name, help_text) in COMMANDS.items():
        if command is not None and name != command:
            subparsers.add_parser(name, help=help_text, add_help=False)
            continue
        dotted = f"pcmr.cli.parsers.{module_name}"
        module = _load_module(dotted)
        if module is None:
            sub = subparsers.add_parser(name, help=f"(unavailable: {dotted} is not installed)")
            sub.set_defaults(_run=lambda args, n=name, m=dotted: _raise(_missing_command(n, m)))
            continue
        sub = module.add_parser(subparsers)
        parser.commands[name] = sub
        if not any("--debug" in action.option_strings for action in sub._actions):
            sub.add_argument(
                "--debug",
                action="store_true",
                default=argparse.SUPPRESS,
                help="show full tracebacks on errors",
            )
        sub.set_defaults(_run=_run_command)
    return parser


def _raise(error: Exception) -> NoReturn:
    raise error


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        text = str(exc.args[0])
    return text


def _is_bad_input(exc: BaseException) -> bool:
    bad = (ValueError, TypeError, KeyError, FileNotFoundError, FileExistsError, NotADirectoryError,
           CommandUnavailableError)
    if isinstance(exc, bad):
        return True
    checkpoint = sys.modules.get("pcmr.train.checkpoint")  # imported by whatever raised one
    return checkpoint is not None and isinstance(exc, checkpoint.CheckpointError)


def _says_what_to_do(exc: BaseException) -> bool:
    """A failed folder write (a full disk, a file-size limit) names the file and what to do; a traceback
    adds nothing to it."""
    atomic = sys.modules.get("pcmr.atomic")  # imported by whatever raised one
    return atomic is not None and isinstance(exc, atomic.FolderWriteError)


def _quiet_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null, so flushing it at exit raises nothing more."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (a test's capture): nothing to redirect
        pass
    finally:
        os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pcmr`` console script; returns the exit status."""
    arguments = list(argv) if argv is not None else sys.argv[1:]
    parser = build_parser(_command_in(arguments) or "")
    args = parser.read(arguments)
    debug = bool(getattr(args, "debug", False))
    try:
        if getattr(args, "device", None) is not None:  # every command's --device, checked one way
            # pcmr.device imports torch: loaded here, for a command that takes --device, never at start-up
            importlib.import_module("pcmr.device").resolve_device(args.device, what="--device")
        status = args._run(args)
        sys.stdout.flush()  # a reader that went away shows here, not in the interpreter's exit
    except BrokenPipeError:  # `pcmr search ... | head`: the reader has what it wanted
        _quiet_stdout()
        return 141  # 128 + SIGPIPE, as a shell reports a command killed by it
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"pcmr {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            raise
        hint = "" if _is_bad_input(exc) or _says_what_to_do(exc) else " (run with --debug for the traceback)"
        print(f"pcmr {args.command}: error: {_one_line(exc)}{hint}", file=sys.stderr)
        return EXIT_BAD_INPUT if _is_bad_input(exc) else EXIT_FAILURE
    return int(status or 0)


if __name__ == "__main__":
    sys.exit(main())
