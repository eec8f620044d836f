"""What needs an operator now: trays and domains, each with why, since when and what to do
(`domains.attention.selectors.needs_attention`)."""
