"""DEV ONLY (SIMULATOR): the gpu-jobs service's log source in the dev cluster, where no kubelet serves
pod logs: the dev node agent writes each pod's output to <state>/pods/<namespace>_<pod>.log.

The dev hub selects it: `--GPUJobs.log_source_class=jupyterhub_gpu_dev.agent_logs.AgentLogs
--AgentLogs.state_dir=<state>` (the product never imports it).
"""
from __future__ import annotations

from pathlib import Path

from traitlets import Unicode
from traitlets.config import LoggingConfigurable

from jupyterhub_gpu.services.jobs.kube import LOG_TAIL_BYTES


class AgentLogs(LoggingConfigurable):
    state_dir = Unicode(help="The dev node agent's state folder (its pod logs are in pods/).").tag(config=True)

    def __init__(self, api=None, **kwargs):
        super().__init__(**kwargs)

    async def read(self, namespace: str, pod: str, tail_bytes: int = LOG_TAIL_BYTES) -> str:
        path = Path(self.state_dir) / "pods" / f"{namespace}_{pod}.log"
        try:
            with path.open("rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - tail_bytes))
                return f.read().decode(errors="replace")
        except OSError:
            return ""
