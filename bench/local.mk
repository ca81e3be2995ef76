### Benchmarks (make bench); never part of make check
EXTRA_DIST += bench/README.md
