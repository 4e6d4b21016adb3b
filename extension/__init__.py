"""jupyterhub-gpu, notebook side: the IPython extension behind `%gpu_submit` (load with `%load_ext extension`).

The magics arrive with the %gpu_submit issue; loading the extension today registers nothing.
"""


def load_ipython_extension(ipython):  # noqa: ARG001 - IPython's extension entry point
    """Called by `%load_ext extension`."""


def unload_ipython_extension(ipython):  # noqa: ARG001
    """Called by `%unload_ext extension`."""
