"""`python -m pfedgm_app.methods` prints the method table of docs/methods.md from the registry."""

from . import markdown_table

print(markdown_table())
