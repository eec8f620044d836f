"""Placement of ComputeDomains onto NVLink cliques: pure functions over a topology snapshot.

`model` holds the values (trays, cliques, requests, placements, rejections), `algorithm`
the decisions inside one clique (`place()`, `clique_summaries()`), `spanning` those over
several (`plan()`, `place_across()`), `simulation` seeded traces for comparing policies.
Nothing here touches the ORM: the snapshot is read by
`domains.computedomains.fabric.topology_snapshot()` and handed in.
"""
