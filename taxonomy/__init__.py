"""The vocabulary as data and the code that applies it: stages, roles, dimensions, profiles,
collective rules and the guideline catalogue. Knows names and rules, never file formats."""
