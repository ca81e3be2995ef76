### Test tools built by make check (generators, fake servers)
