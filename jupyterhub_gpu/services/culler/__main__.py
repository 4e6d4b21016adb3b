from jupyterhub_gpu.contract import adopt_hub_api_url

adopt_hub_api_url()  # before jupyterhub-idle-culler reads $JUPYTERHUB_API_URL (at import)

from jupyterhub_gpu.services.culler.service import main  # noqa: E402

main()
