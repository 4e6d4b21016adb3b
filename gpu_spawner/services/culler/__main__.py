from gpu_spawner.contract import adopt_hub_api_url

adopt_hub_api_url()  # before jupyterhub-idle-culler reads $JUPYTERHUB_API_URL (at import)

from gpu_spawner.services.culler.service import main  # noqa: E402

main()
