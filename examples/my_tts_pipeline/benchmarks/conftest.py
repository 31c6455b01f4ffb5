import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # my_pipeline.py, the code under test
