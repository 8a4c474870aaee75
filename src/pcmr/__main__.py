"""``python -m pcmr ...``: the ``pcmr`` command line (same as the console script)."""

from __future__ import annotations

import sys

from pcmr.cli import main

if __name__ == "__main__":
    sys.exit(main())
