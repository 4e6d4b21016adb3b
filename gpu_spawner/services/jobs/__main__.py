import sys

from gpu_spawner.services.jobs.options import main

sys.exit(main())
