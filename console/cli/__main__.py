"""`python -m console.cli` (and `spark-submit console/cli/__main__.py`): the batch-console command."""

import sys

from console.cli import main

sys.exit(main())
