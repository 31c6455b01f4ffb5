"""``python -m perfsuite``: the perfsuite command (perfsuite.tools.cli), for callers without the script on PATH."""

from perfsuite.tools.cli import main

raise SystemExit(main())
