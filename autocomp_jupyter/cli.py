"""The `autocomp` command line: a thin shell over the Python API.

Exit status: 0 on success, 2 on bad input (with `file:line:col: message` on stderr and
no traceback), 1 when a run fails verification.
"""
from __future__ import annotations

import argparse
import sys

from . import __version__
from .errors import UserError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's default exit code is 2 too; keep its message short
        self.print_usage(sys.stderr)
        self.exit(2, f"autocomp: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="autocomp", description="Rule-driven optimiser for tensor programs on tensor accelerators")
    parser.add_argument("--version", action="version", version=f"autocomp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    check = sub.add_parser("check", help="parse a program, infer shapes, print its tensors and ops")
    check.add_argument("file", help="a .acir program")
    check.add_argument("--run", action="store_true", help="also run it in the reference interpreter")
    check.add_argument("--max-extent", type=int, default=None, metavar="N",
                       help="shrink dimensions above N to N (keeps the structure) before running")
    return parser


def cmd_check(args) -> int:
    from .dsl import load

    program = load(args.file, max_extent=args.max_extent)
    print(f"{args.file}: ok, {len(program.ops)} ops, {program.flops:,} flops, outputs {', '.join(program.outputs)}")
    print(program.summary())
    if args.run:
        from . import interp

        values = interp.run(program)
        for name in program.outputs:
            v = values[name]
            print(f"{name}: shape {list(v.shape)}, mean {v.mean():.6g}, max |x| {abs(v).max():.6g}")
    return 0


COMMANDS = {"check": cmd_check}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    try:
        return COMMANDS[args.command](args)
    except UserError as err:
        print(err.format(), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("autocomp: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
