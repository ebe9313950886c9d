"""`python3 -m imgbuild.report.documents --write docs/schema`: write each document's JSON Schema from its type;
`--check docs/schema` exits 1 when a file differs from what the types make (the drift check .ci/run runs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from imgbuild.report.documents import schema_files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m imgbuild.report.documents", description=__doc__)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", type=Path, metavar="DIR", help="write the schemas into DIR")
    mode.add_argument("--check", type=Path, metavar="DIR", help="exit 1 when DIR's schemas differ from the types")
    args = parser.parse_args(argv)
    files = schema_files()
    if args.write:
        args.write.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            path = args.write / name
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                path.write_text(text, encoding="utf-8")
                print(f"wrote {path}")
        return 0
    stale = [n for n, text in files.items() if not (p := args.check / n).is_file() or p.read_text("utf-8") != text]
    for name in stale:
        print(f"{args.check / name}: differs from its type; run python3 -m imgbuild.report.documents --write "
              f"{args.check}", file=sys.stderr)  # fmt: skip
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
