"""Foresight: what the fabric's future holds for the people who use it.

`blast` answers "what breaks if this part goes down or is drained" for a tray, a set of
trays, an NVLink switch tray, a rack, a clique or a power shelf. Reads only; the pages,
the API and the drain previews call it.
"""
