"""Kubernetes sync bookkeeping (owned by the kube integration)."""
