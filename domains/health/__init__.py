"""The portal's health as operators need it: what keeps it from working (the database,
Redis, the Celery workers) and which trays' agents cannot talk to it, read in one place."""
