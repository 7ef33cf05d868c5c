"""Plans: the steps a call runs, and how they are built from an expression."""
