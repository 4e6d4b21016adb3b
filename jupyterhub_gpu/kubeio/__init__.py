"""Kubernetes I/O shared by the hub, the services and the tools: informers (`informer.py`), and the one place
that makes API clients and loads the kube config (`clients.py`). Below services/ and hub/; imports nothing of
the product but itself."""
