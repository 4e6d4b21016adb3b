"""What the cluster says, read one way (pure: no I/O, no Kubernetes client): Kubernetes timestamps
(times.py), an object's conditions (conditions.py), Kueue Workloads (workloads.py), DCGM series labels
(dcgm.py), DRA devices in ResourceSlices and ResourceClaims (dra_devices.py), and what the profiles file
prices a server at and the rules per profile (prices.py, rules.py).

Below builders/, services/ and hub/: every service and the hub read these facts from here, so no service
imports another for them. Only the standard library and model/ below it.
"""
