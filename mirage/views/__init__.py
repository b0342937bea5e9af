"""Presentation: text rendering, HTML reports, results as pandas tables, run folders as pages, results pages (``pages``)
and what ``mirage view`` opens."""

__all__ = []
