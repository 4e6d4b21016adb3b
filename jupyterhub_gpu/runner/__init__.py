"""The runner: entrypoint of the runner image; executes a `%gpu_submit` notebook snapshot in a Job's pod.

It runs the snapshot with papermill (parameters go into the `parameters` cell), prints cell
progress to its log, always writes the output notebook (also when a cell fails or the pod is told
to stop), and exposes CHECKPOINT_DIR so the notebook's own code can resume after a restart.
"""
