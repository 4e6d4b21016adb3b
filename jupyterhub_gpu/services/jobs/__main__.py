import sys

from jupyterhub_gpu.contract import adopt_hub_api_url

adopt_hub_api_url()  # the hub API where the hub listens, when the hub runs this service in its own pod

from jupyterhub_gpu.services.jobs.app import main  # noqa: E402

try:
    sys.exit(main())
except KeyboardInterrupt:  # the hub stops its managed services with SIGINT: a stop, not a crash
    from jupyterhub_gpu.services.stopped import exit_now

    exit_now()
