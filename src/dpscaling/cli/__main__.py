"""``python -m dpscaling.cli``: the ``dpscaling`` command."""

import sys

from dpscaling.cli import main

sys.exit(main())
