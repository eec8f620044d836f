"""`manage.py seed_demo`: the demo's fabric, tenants and agent join token in one command.

The top layer of `domains/`: it composes the seeds of inventory and tenancy and the agents'
join token, which no app below may know together.
"""
