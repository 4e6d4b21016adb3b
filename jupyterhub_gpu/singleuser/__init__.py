"""jupyterhub-gpu, notebook side: the IPython extension behind `%gpu_submit`
(load with `%load_ext jupyterhub_gpu.singleuser`).

Registers `%gpu_submit`, `%gpu_jobs`, `%gpu_logs` and `%gpu_cancel` (see jupyterhub_gpu/singleuser/magic.py); they talk
only to the `gpu-jobs` hub service, with the user's own hub token.
"""


def load_ipython_extension(ipython):
    """Called by `%load_ext jupyterhub_gpu.singleuser`."""
    from . import frontend
    from .magic import GPUMagics

    ipython.register_magics(GPUMagics)
    frontend.register(ipython)  # JupyterLab's extension can then save the notebook for %gpu_submit


def unload_ipython_extension(ipython):  # noqa: ARG001
    """Called by `%unload_ext jupyterhub_gpu.singleuser`."""
