"""DEV agent (SIMULATOR): a Job's mount paths in its env point at local folders."""
from pathlib import Path

from devcluster.agent import rewrite_paths


def test_env_paths_follow_the_longest_mount():
    mounts = {"/checkpoints": Path("/h/alice/checkpoints/j1"), "/output": Path("/h/alice/gpu-jobs"),
              "/snapshot": Path("/s/pods/x/volumes/snapshot")}
    env = {"CHECKPOINT_DIR": "/checkpoints", "OUTPUT_DIR": "/output/j1", "GPUHUB_SNAPSHOT": "/snapshot/notebook.gz",
           "GPUHUB_JOB": "j1", "OTHER": "/outputs-not-a-mount"}
    assert rewrite_paths(env, mounts) == {"CHECKPOINT_DIR": "/h/alice/checkpoints/j1",
                                          "OUTPUT_DIR": "/h/alice/gpu-jobs/j1",
                                          "GPUHUB_SNAPSHOT": "/s/pods/x/volumes/snapshot/notebook.gz"}
