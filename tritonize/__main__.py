"""`python -m tritonize`: the same app as the `tritonize` command."""

from tritonize.cli import main

main()
