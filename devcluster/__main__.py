"""`python -m devcluster up|status|down`."""
import sys

from devcluster.cli import main

sys.exit(main())
