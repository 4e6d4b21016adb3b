"""The hub's `GET /hub/api/user` as JupyterHub answers it, for tests of the real gpu-jobs app in this process:
the model of the token in the Authorization header (from the application's `users` setting: token → name),
else 403."""
from __future__ import annotations

from tornado import web

from jupyterhub_gpu.contract import JOBS_ACCESS_SCOPE


class HubUserAPI(web.RequestHandler):
    def get(self):
        name = self.settings["users"].get(self.request.headers.get("Authorization", "").partition(" ")[2])
        if name is None:
            raise web.HTTPError(403)
        self.finish({"kind": "user", "name": name, "groups": ["data-science"], "admin": False,
                     "scopes": [JOBS_ACCESS_SCOPE]})


def hub_user_app(users: dict[str, str]) -> web.Application:
    return web.Application([(r"/hub/api/user", HubUserAPI)], users=users)
