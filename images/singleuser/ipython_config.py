# Loaded by every IPython kernel in the singleuser image (/etc/ipython/ipython_config.py):
# registers %gpu_submit, %gpu_jobs, %gpu_logs and %gpu_cancel (jupyterhub-gpu's extension).
c = get_config()  # noqa: F821
c.InteractiveShellApp.extensions = ["jupyterhub_gpu.singleuser"]
