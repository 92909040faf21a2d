"""What more than one test module needs: profile builders, stand-in processes, canned servers and data.

Test modules import from here (or from tests/fakes, tests/corpus.py, the tiers' harnesses), never from one
another: a test module is a list of tests, and a helper that another module needs lives in this package
(tests/unit/test_test_helpers.py keeps it so)."""
