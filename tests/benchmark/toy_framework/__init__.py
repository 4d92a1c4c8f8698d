"""A toy third framework that exists only in the tests: its own launch (a stand-in trainer writing its own sink
format), its own reader and learning-key map, and one registry entry made by a test fixture. It proves a framework is
added without editing any module of the harness."""

from tests.benchmark.toy_framework.adapter import ADAPTER

__all__ = ["ADAPTER"]
