"""``python -m ragtrack ...``: the ``ragtrack`` command."""

import sys

from ragtrack.pipeline.cli import main

sys.exit(main())
