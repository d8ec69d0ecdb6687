"""`python -m pfedgm_app.methods` prints the README's method table from the registry."""

from . import markdown_table

print(markdown_table())
