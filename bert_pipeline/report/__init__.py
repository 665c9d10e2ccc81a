"""Reporting, above training: the family report page and its sections, figures, the provenance card, and the
budget-curve, variants and retrieval tables. It reads what ``evaluation`` measured and what training produced;
nothing below it imports it."""
