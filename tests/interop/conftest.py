"""tests/interop shares tests/spark's helpers module (spark_helpers)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "spark"))
