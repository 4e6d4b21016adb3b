"""`python -m jupyterhub_gpu_dev up|status|down`."""
import sys

from jupyterhub_gpu_dev.cli import main

sys.exit(main())
