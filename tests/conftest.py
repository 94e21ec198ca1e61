import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the checkout under test comes first, whatever is installed in the environment
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
SHARED_DATA = os.path.join(os.path.dirname(ROOT), "shared", "data")
