"""hsdp-sweep: parameter studies for hsdp-train (expand a spec into decks, run them, collect the results)."""
