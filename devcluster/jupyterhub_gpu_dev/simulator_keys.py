"""Keys only the dev cluster's pieces share (the product's own keys are in jupyterhub_gpu.contract)."""
from jupyterhub_gpu.contract import LABEL_PREFIX

#: Pods the dev node agent (SIMULATOR) runs as local processes; KWOK leaves their status to it.
DEV_AGENT_LABEL = f"{LABEL_PREFIX}/dev-agent"
#: Set on a node to simulate a GPU the device plugin advertises but the container cannot see.
SIMULATE_GPU_ANNOTATION = f"{LABEL_PREFIX}/simulate-gpu"
#: Annotation on KWOK nodes that says what they are.
SIMULATOR_ANNOTATION = f"{LABEL_PREFIX}/simulator"
#: The agent hands a prepared PATH (simulated nvidia-smi) to a pod's process through this variable.
SIM_PATH_ENV = "GPUHUB_SIM_PATH"
#: Set in every process the dev agent runs.
DEV_AGENT_ENV = "GPUHUB_DEV_AGENT"
