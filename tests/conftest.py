import os
import sys
from pathlib import Path

# Tests import the repo's packages whether or not it is pip-installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault('HYPOTHESIS_STORAGE_DIRECTORY', '/tmp/mrc-hypothesis')
