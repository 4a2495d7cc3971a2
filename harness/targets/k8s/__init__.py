"""The docker and Kubernetes targets: what a run would deploy on a GPU host, rendered from manifests/ and
validated offline (plan, render, validate), and the cluster side that applies, watches and deletes it."""
