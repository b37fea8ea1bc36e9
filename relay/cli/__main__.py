"""``python -m relay.cli``: the same as the ``relay`` command."""

import sys

from relay.cli.main import main

sys.exit(main())
