"""The kernel's line to the JupyterLab extension, so `%gpu_submit` can have the notebook saved first.

The extension opens a comm (target `LAB_COMM_TARGET`) on each notebook kernel once it is idle; the kernel
keeps the newest one. `%gpu_submit` sends `{"op": "save"}` on it (kernel → front end messages flow while
the cell runs) and waits until the server's copy is newer than the request, up to `SAVE_WAIT` seconds.
Without the extension (classic Notebook, VS Code, papermill) there is no comm: the saved copy is used
as before, with the magic's note saying so.
"""
from __future__ import annotations

import time
from typing import Callable

from jupyterhub_gpu.contract import LAB_COMM_TARGET

#: How long `%gpu_submit` waits for JupyterLab to save (a save is well under a second normally).
SAVE_WAIT = 10.0

_comm = None


def register(ipython) -> None:
    """Accept the extension's comm (called from `load_ipython_extension`); nothing to do outside a kernel."""
    kernel = getattr(ipython, "kernel", None)
    if kernel is None:
        return
    try:
        from comm import get_comm_manager

        manager = get_comm_manager()
    except ImportError:  # ipykernel < 6.22 keeps its own manager
        manager = getattr(kernel, "comm_manager", None)
    if manager is not None:
        manager.register_target(LAB_COMM_TARGET, _opened)


def _opened(comm, msg) -> None:  # noqa: ARG001
    global _comm
    _comm = comm
    comm.on_close(lambda _msg: _forget(comm))


def _forget(comm) -> None:
    global _comm
    if _comm is comm:
        _comm = None


def present() -> bool:
    return _comm is not None


def save_first(path: str, saved_at: Callable[[], float | None], wait: float = SAVE_WAIT) -> bool:
    """Ask JupyterLab to save and wait until `saved_at()` (the server's copy's time) is past the request.
    True when the saved copy is now the editor's content; False without a front end or when it did not
    save in time (the caller then says that the last saved copy is what runs)."""
    if _comm is None:
        return False
    asked = time.time()
    try:
        _comm.send({"op": "save", "path": path})
    except Exception:  # a closed or broken comm: no front end to ask
        return False
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        at = saved_at()
        if at is not None and at >= asked - 1.0:  # the contents API's time has whole-second precision at worst
            return True
        time.sleep(0.25)
    return False
