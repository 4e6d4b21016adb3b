"""DEV ONLY (SIMULATOR): the gpu-jobs service's log source in the dev cluster, where no kubelet serves
pod logs: the dev node agent writes each pod's output to <state>/pods/<namespace>_<pod>.log.

The dev hub selects it: `--GPUJobs.log_source_class=jupyterhub_gpu_dev.agent_logs.AgentLogs
--AgentLogs.state_dir=<state>` (the product never imports it).
"""
from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

from traitlets import Unicode
from traitlets.config import LoggingConfigurable


class AgentLogs(LoggingConfigurable):
    state_dir = Unicode(help="The dev node agent's state folder (its pod logs are in pods/).").tag(config=True)

    def __init__(self, api=None, **kwargs):
        super().__init__(**kwargs)

    async def fetch(self, namespace: str, pod: str, tail_lines: int | None, limit_bytes: int | None) -> bytes:
        """As the kubelet's log API answers (never kinder): the last `tail_lines` lines, then at most `limit_bytes`
        of them FROM THEIR START; a pod with no log yet answers b''."""
        path = Path(self.state_dir) / "pods" / f"{namespace}_{pod}.log"
        try:
            with path.open("rb") as f:
                return kubelet_selection(f, tail_lines, limit_bytes)
        except OSError:
            return b""


def kubelet_selection(f: BinaryIO, tail_lines: int | None, limit_bytes: int | None, block: int = 64 * 1024) -> bytes:
    """kubelet (pkg/kubelet/kuberuntime/logs ReadLogs): start `tail_lines` lines before the end (all when None or
    more than there are; none for 0), then copy until `limit_bytes` are sent. Reads backwards in blocks."""
    f.seek(0, 2)
    end, start = f.tell(), 0
    if tail_lines is not None:
        if tail_lines <= 0:
            return b""
        buf, pos = b"", end
        while pos > 0:
            step = min(block, pos)
            pos -= step
            f.seek(pos)
            buf = f.read(step) + buf
            if _lines_body(buf).count(b"\n") >= tail_lines:
                break
        body = _lines_body(buf)
        idx = len(body)
        for _ in range(tail_lines):
            idx = body.rfind(b"\n", 0, idx)
            if idx < 0:
                break
        start = pos + idx + 1 if idx >= 0 else pos
    f.seek(start)
    return f.read(end - start if limit_bytes is None else min(end - start, limit_bytes))


def _lines_body(buf: bytes) -> bytes:
    """The bytes whose newlines separate lines: the file's last newline ends the last line, it separates none."""
    return buf[:-1] if buf.endswith(b"\n") else buf
