"""``python -m perfsuite.history``: the history commands without the perfsuite CLI."""

import sys

from perfsuite.history.cli import main

sys.exit(main())
