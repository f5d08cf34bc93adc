"""The ``tipad`` command line (also ``python -m tipad_transforms``): :func:`main`, one module
per part. Every error is one ``tipad: error: ...`` line (``-v``: with the traceback)."""

from __future__ import annotations

import argparse
import signal
import sys
import traceback
from collections.abc import Sequence

from .arguments import UsageError, build_parser
from .signals import SIGPIPE, Interrupted, quiet_closed_pipes, stop_signals

__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tipad`` with ``argv`` (default ``sys.argv[1:]``); return the exit status (0 done,
    1 some inputs not padded, 2 usage error, 128 + N stopped by signal N)."""
    with stop_signals() as received:
        try:
            try:
                args = build_parser().parse_args(argv)
            except SystemExit as e:  # argparse exits on --help, --version and usage errors
                return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
            status = _run(args)
        except Interrupted as e:
            newline = "\n" if sys.stderr.isatty() else ""  # end a progress line first
            _say(
                f"{newline}tipad: stopped by {signal.Signals(e.signum).name}; the outputs "
                "written are complete, no partial file is left (--skip-existing resumes)"
            )
            return 128 + e.signum
        except BrokenPipeError:  # stdout is a pipe whose reader left (| head): end quietly
            quiet_closed_pipes()
            return 128 + SIGPIPE
    # A signal that came as the handlers were restored: recorded, not raised.
    return 128 + received[0] if received else status


def _say(message: str) -> None:
    """``message`` on stderr, if stderr can still take it."""
    try:
        print(message, file=sys.stderr)
    except OSError:
        pass


def _run(args: argparse.Namespace) -> int:
    """The command's exit status; every error is one line on stderr."""
    from concurrent.futures import BrokenExecutor

    from . import demo, pad

    verbose = bool(getattr(args, "verbose", False))
    try:
        status = demo.run(args) if args.command == "demo" else pad.run(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
        return status
    except UsageError as e:
        print(f"tipad: error: {e}", file=sys.stderr)
        return 2
    except BrokenExecutor as e:  # a worker process died (killed, out of memory)
        print(f"tipad: error: a worker process stopped: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        raise
    except Exception as e:  # out of memory, or a bug: still one line (-v: the traceback)
        if verbose:
            traceback.print_exc()
        hint = "" if verbose or args.command != "pad" else " (-v shows the traceback)"
        text = " ".join(str(e).split())
        print(f"tipad: error: {type(e).__name__}: {text}{hint}", file=sys.stderr)
        return 1
