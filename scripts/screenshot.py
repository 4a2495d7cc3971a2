"""The first screen of an HTML report as a PNG, as a reader sees it on opening the file (headless Chromium):
    python scripts/screenshot.py reports/examples/<run>/report.html reports/examples/<run>/screenshot.png
for committing next to an example report. Needs `make setup-chromium`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# scripts/ is not a package: run from a checkout, the harness next to it is importable without an install
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.reporting.browser import BrowserMissing, chromium_driver  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="The first screen of an HTML report as a PNG, from headless Chromium.")
    ap.add_argument("html", type=Path, help="the report.html to open")
    ap.add_argument("out", type=Path, help="the PNG to write")
    ap.add_argument("--width", type=int, default=1280, help="viewport width in CSS pixels (default 1280)")
    ap.add_argument("--height", type=int, default=900, help="viewport height in CSS pixels (default 900)")
    args = ap.parse_args(argv)
    if not args.html.is_file():
        print(f"screenshot: {args.html} is not a file", file=sys.stderr)
        return 2
    try:
        with chromium_driver(args.width, args.height) as driver:
            driver.get(args.html.resolve().as_uri())  # returns after the load event: images decoded
            args.out.parent.mkdir(parents=True, exist_ok=True)
            if not driver.save_screenshot(str(args.out)):
                print(f"screenshot: Chromium could not write {args.out}", file=sys.stderr)
                return 1
    except BrowserMissing as e:
        print(f"screenshot: {e}", file=sys.stderr)
        return 2
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
