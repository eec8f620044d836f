"""API representations. Output fields are camelCase like Kubernetes objects; input
serializers are strict (unknown fields are errors), like NVIDIA's strict config decoding."""
