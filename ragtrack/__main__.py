"""``python -m ragtrack ...``: the ``ragtrack`` command."""

import sys

from ragtrack.pipeline.commands.cli import main

sys.exit(main())
