"""Write receipts: what makes a write safe to run again (portal.outage, docs/reliability.md)."""
