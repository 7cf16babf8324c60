"""Reading the store: board rows and votes, tables in every format, the static site, plots."""
