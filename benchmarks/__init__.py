"""Scripts that time mirage and compare it with the reference procedure (:mod:`mirage.peers.inseq`); run them as
``python benchmarks/NAME.py``. Each gets its command line, and what it records (command, commit, machine), from
:mod:`harness` (``benchmarks/harness.py``). Nothing here is imported by mirage or its tests."""
