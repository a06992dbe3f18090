"""``python -m engine.cli``: the ``msgpt`` command."""

import sys

from engine.cli.predict import main

sys.exit(main())
