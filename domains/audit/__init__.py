"""The audit trail: who did what (`Event` rows, written by `record_event`) and the
announcements that tell listeners about a change once it is committed.

The bottom layer of `domains/`: every app may import it, and it imports none of them
(its foreign keys name the models they point at by their app label).
"""
