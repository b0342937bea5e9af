"""Peers: other attribution procedures run on mirage's own prompts and answers, for the parity tests and the
benchmarks. Each imports its optional dependency only when it runs.

- :mod:`mirage.peers.inseq`: the MIRAGE paper's procedure as inseq implements it (``attribute_context``), and
  ``sentence_citations``, its scores cited through mirage's own selector and aggregation.
- :mod:`mirage.peers.contextcite`: ContextCite (Cohen-Wang et al., 2024) on XOR-AttriQA, one source per passage.
- :mod:`mirage.peers.authors`: the MIRAGE authors' XOR-AttriQA scoring (``MIRAGE_match.py``) re-implemented on
  inseq's outputs, the independent check of ``--preset authors``.
"""

__all__ = []
