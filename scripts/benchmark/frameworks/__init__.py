"""One folder per framework, each exporting its `FrameworkAdapter` (adapter.py); registry.py maps names to them."""
