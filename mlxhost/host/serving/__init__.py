"""One request's way through the parent: admitted (or turned away), leased its share of the
machine, recorded as a session, and relayed to its model's worker."""
