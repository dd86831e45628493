"""Scale-out deployment: the model repository in object storage (`deploy push`) and the Kubernetes /
KServe bundle that serves it (`deploy k8s`)."""
