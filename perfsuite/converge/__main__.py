"""``python -m perfsuite.converge``."""

import sys

from perfsuite.converge.cli import main

sys.exit(main())
