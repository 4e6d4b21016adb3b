"""A notebook kernel of a real server, driven the way JupyterLab drives it: a session for a notebook path (so the
kernel knows its notebook, $JPY_SESSION_NAME), then execute requests over the kernel's websocket."""
from __future__ import annotations

import asyncio
import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import requests
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect


@dataclass
class Executed:
    status: str
    stdout: str = ""
    outputs: list[dict] = field(default_factory=list)
    error: str = ""


class LabKernel:
    def __init__(self, server_url: str, token: str, notebook: str):
        self.url, self.token, self.notebook = server_url.rstrip("/"), token, notebook
        self.headers = {"Authorization": f"token {token}"}
        r = requests.post(f"{self.url}/api/sessions", headers=self.headers, timeout=60,
                          json={"path": notebook, "type": "notebook", "name": notebook, "kernel": {"name": "python3"}})
        r.raise_for_status()
        self.kernel_id = r.json()["kernel"]["id"]
        self.session = uuid.uuid4().hex

    def execute(self, code: str, timeout: float = 120) -> Executed:
        # a thread of its own: Playwright's sync API (a browser test earlier in the same worker) leaves an event
        # loop running in this one, where asyncio.run refuses to start
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, self._execute(code, timeout)).result()

    async def _execute(self, code: str, timeout: float) -> Executed:
        ws_url = self.url.replace("http", "ws", 1) + f"/api/kernels/{self.kernel_id}/channels?session_id={self.session}"
        conn = await websocket_connect(HTTPRequest(ws_url, headers=self.headers, connect_timeout=30))
        msg_id = uuid.uuid4().hex
        conn.write_message(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "test", "session": self.session,
                       "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}))
        out = Executed("unknown")
        reply = idle = False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while not (reply and idle):
                raw = await asyncio.wait_for(conn.read_message(), max(0.1, deadline - loop.time()))
                if raw is None:
                    raise ConnectionError("the kernel's websocket closed")
                msg = json.loads(raw)
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind, content = msg["header"]["msg_type"], msg.get("content", {})
                if kind == "stream":
                    out.stdout += content.get("text", "")
                elif kind in ("display_data", "execute_result"):
                    out.outputs.append(content.get("data", {}))
                elif kind == "error":
                    out.error = "\n".join(content.get("traceback", [])) or content.get("evalue", "")
                elif kind == "execute_reply":
                    out.status, reply = content.get("status", "unknown"), True
                elif kind == "status" and content.get("execution_state") == "idle":
                    idle = True
        finally:
            conn.close()
        return out
